"""The tables of engage-sync's own state, and the two SQL helpers every store needs.

`engage_cursors` one row per integration; `engage_runs` one row per run (its window, progress
and totals); `engage_journal` one row per request (or per merged stretch of acknowledged
requests after compaction); `engage_row_errors` rejected, failed and in-doubt rows (keys and
reasons, never payload values), and service errors that name no row (kind `unmapped`, keyed by
their request); `engage_acks` what lookback remembers; `engage_fields` what the field-level
diff remembers (digests, never values); `engage_source_schemas` the source schema the schema
guard last accepted; `engage_retries` failed requests that later runs send again;
`engage_writebacks` which runs were written back to the user's warehouse; `engage_spend` the
data points reserved and billed per workspace and UTC day; `engage_traces` what became of
each row of runs that trace (attribute names, never values); `engage_alerts` the alerts
raised and not yet cleared.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from engage_sync.state.field_store_sql import FIELDS_TABLE, tune

metadata = sa.MetaData()

cursors = sa.Table(
    "engage_cursors",
    metadata,
    sa.Column("integration", sa.String(100), primary_key=True),
    sa.Column("cursor", sa.Text, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

runs = sa.Table(
    "engage_runs",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("integration", sa.String(100), nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("mode", sa.String(20), nullable=False),
    sa.Column("scope", sa.Text),
    sa.Column("job_status", sa.String(20), nullable=False),
    sa.Column("sync_start_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("sync_finish_time", sa.DateTime(timezone=True)),
    sa.Column("window_start", sa.Text),
    sa.Column("signpost", sa.Text),
    sa.Column("floor", sa.Text),
    sa.Column("progress", sa.Text),
    sa.Column("last_timestamp_synced", sa.Text),
    sa.Column("rows_synced", sa.Integer, nullable=False, default=0),
    sa.Column("rows_failed_with_errors", sa.Integer, nullable=False, default=0),
    sa.Column("rows_rejected", sa.Integer, nullable=False, default=0),
    sa.Column("rows_in_doubt", sa.Integer, nullable=False, default=0),
    sa.Column("requests_sent", sa.Integer, nullable=False, default=0),
    # added after the first release: `add_missing_columns` adds them to older databases
    sa.Column("rows_unchanged", sa.BigInteger, nullable=False, default=0, server_default="0"),
    sa.Column("data_points_sent", sa.BigInteger, nullable=False, default=0,
              server_default="0"),
    sa.Column("data_points_saved", sa.BigInteger, nullable=False, default=0,
              server_default="0"),
    sa.Column("rows_skipped_null_cursor", sa.Integer, nullable=False, server_default="0"),
    sa.Column("errors_unmapped", sa.Integer, nullable=False, server_default="0"),
    sa.Column("rows_possibly_duplicated", sa.Integer, nullable=False, server_default="0"),
    sa.Column("rows_left", sa.Integer, nullable=False, server_default="0"),  # snapshot runs
    sa.Column("message", sa.Text),
    sa.Column("owner", sa.String(200)),
    # added after the first release (`add_missing_columns`): the owner's lease (`lease.py`)
    sa.Column("lease_until", sa.DateTime(timezone=True)),
    sa.UniqueConstraint("integration", "seq", name="uq_engage_runs_integration_seq"),
)

journal = sa.Table(
    "engage_journal",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("req_no", sa.Integer, primary_key=True),
    sa.Column("start_cursor", sa.Text),
    sa.Column("end_cursor", sa.Text, nullable=False),
    sa.Column("state", sa.String(10), nullable=False),
    sa.Column("item_count", sa.Integer, nullable=False),
    sa.Column("synced", sa.Integer, nullable=False, default=0),
    sa.Column("failed", sa.Integer, nullable=False, default=0),
    sa.Column("in_doubt", sa.Integer, nullable=False, default=0),
    sa.Column("reason", sa.Text),
    # added after the first release (`add_missing_columns`): the row keys of the request's
    # items, as a JSON list, so a request left in flight by a kill is named in the transaction
    # that marks it in doubt or re-sent (exact journals only; NULL for grouped journals)
    sa.Column("item_keys", sa.Text),
    # added with the write-back (`add_missing_columns`): the declared key columns' values of
    # those items, as they are in the source (`row_errors.key_values`), a JSON list per item
    sa.Column("item_key_values", sa.Text),
)

row_errors = sa.Table(
    "engage_row_errors",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("kind", sa.String(10), primary_key=True),
    sa.Column("position", sa.Text, primary_key=True),
    sa.Column("row_key", sa.Text, nullable=False),
    sa.Column("integration", sa.String(100), nullable=False, index=True),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    # added with the write-back (`add_missing_columns`): the row's declared key columns'
    # values as they are in the source, a JSON list encoded as cursors are (`encode_cursor`);
    # a payload key column as the MD5 of its text, as in cursors. NULL when not known.
    sa.Column("key_values", sa.Text),
)

acks = sa.Table(
    "engage_acks",
    metadata,
    sa.Column("integration", sa.String(100), primary_key=True),
    sa.Column("row_key", sa.Text, primary_key=True),
    sa.Column("stamp", sa.String(64), primary_key=True),
    sa.Column("digest", sa.String(40), nullable=False),
)
"""Rows that ended (sent, rejected, failed or in doubt) inside an integration's lookback
period: (row key, cursor value, content digest). Kept only for integrations with `lookback`."""

fields = sa.Table(
    FIELDS_TABLE,
    metadata,
    sa.Column("integration", sa.String(100), primary_key=True),
    sa.Column("user_key", sa.LargeBinary(16), primary_key=True),
    sa.Column("digests", sa.LargeBinary, nullable=False),
    sqlite_with_rowid=False,  # one B-tree, not a table and its key's index: half the writes
)
"""Per (integration, user): the digest of each attribute value the service acknowledged
(`field_diff.encode`: 12 bytes per attribute). `user_key` is a 128-bit hash of the user
reference, so neither values nor identifiers are copied here."""

retries = sa.Table(
    "engage_retries",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("req_no", sa.Integer, primary_key=True),
    sa.Column("integration", sa.String(100), nullable=False, index=True),
    sa.Column("start_cursor", sa.Text),
    sa.Column("end_cursor", sa.Text, nullable=False),
    sa.Column("floor", sa.Text),
    sa.Column("before", sa.Text),
    sa.Column("partition", sa.String(20)),
    sa.Column("tries", sa.Integer, nullable=False),
    sa.Column("state", sa.String(10), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("item_keys", sa.Text),
)
"""Requests that failed (or were left in doubt under `resend`), kept to be sent again by later
runs (`run/retries.py`): the request's range of the source order (start < position <= end,
within the run's floor, before and partition; with the row keys of its items where the journal
kept them, so only those rows are sent again), how many tries it has had, and its state:
`pending`, `parked` (out of tries), `landed` or `retried` (sent again; what failed again is
a newer row)."""

writebacks = sa.Table(
    "engage_writebacks",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("integration", sa.String(100), nullable=False, index=True),
    sa.Column("state", sa.String(10), nullable=False),
    sa.Column("tries", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
"""Runs written back to the user's warehouse (`written`), or whose write-back failed and is
tried again by the integration's next run (`pending`, with the last error: no value, no
secret)."""

source_schemas = sa.Table(
    "engage_source_schemas",
    metadata,
    sa.Column("integration", sa.String(100), primary_key=True),
    sa.Column("source_schema", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
)
"""Per integration: the source's columns and types (and payload keys' JSON types) the last
run accepted (`read/source_schema.py`, JSON text), which the schema guard compares with."""

spend = sa.Table(
    "engage_spend",
    metadata,
    sa.Column("workspace", sa.String(1000), primary_key=True),
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("points_reserved", sa.BigInteger, nullable=False),
    sa.Column("points_billed", sa.BigInteger, nullable=False),
)
"""Data points per workspace (the service's base URL) and UTC day (`YYYY-MM-DD`): reserved
by runs that predicted them (`state/spend.py`) and billed by runs that finished."""

traces = sa.Table(
    "engage_traces",
    metadata,
    sa.Column("run_id", sa.String(36), primary_key=True),
    sa.Column("key_hash", sa.LargeBinary(16), primary_key=True),
    sa.Column("integration", sa.String(100), nullable=False, index=True),
    sa.Column("outcome", sa.String(12), nullable=False),
    sa.Column("sent", sa.Text, nullable=False),
    sa.Column("unchanged", sa.Text, nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
)
"""With `trace: true`: per run and row key (a 128-bit hash of it, never the key), what became
of the row: its outcome and the attribute names sent and left out as unchanged (names, never
values); pruned with row errors (`state/traces.py`)."""

leave_checks = sa.Table(
    "engage_leave_checks",
    metadata,
    sa.Column("integration", sa.String(100), primary_key=True),
    sa.Column("checked_at", sa.DateTime(timezone=True)),
    sa.Column("members", sa.LargeBinary),
    sa.Column("pending", sa.LargeBinary),
)
"""Cursor integrations with `on_leave` (`state/leave_checks.py`): when their source's keys were
last compared, the users found then (their identifiers, as Arrow), and the leavers of a check
whose requests are under way (so a killed one resumes on the same rows)."""

alerts = sa.Table(
    "engage_alerts",
    metadata,
    sa.Column("integration", sa.String(100), primary_key=True),
    sa.Column("condition", sa.String(20), primary_key=True),
    sa.Column("raised_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("figures", sa.Text, nullable=False),
)
"""Per integration and condition (`alerts/conditions.py`): an alert raised and not yet
cleared, with the figures it was raised with (JSON: numbers and names, never a row's value).
A row is inserted only where none is (raised once) and deleted to clear (cleared once), so of
two processes that see the same change only one delivers it (`state/alert_states.py`)."""

field_log = sa.Table(
    "engage_field_log",
    metadata,
    # SQLite: INTEGER PRIMARY KEY is the rowid, so the log is appended in key order
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
              autoincrement=True),
    sa.Column("integration", sa.String(100), nullable=False),
    sa.Column("user_key", sa.LargeBinary(16), nullable=False),
    sa.Column("fresh", sa.Boolean, nullable=False),
    sa.Column("digests", sa.LargeBinary, nullable=False),
)
"""Field digests acknowledged since the last fold, in settle order (`field_record`): the
record of a user is its `engage_fields` row with these applied. No index but the sequence:
an append touches the last page only."""

ADDED_COLUMNS = ("rows_unchanged", "data_points_sent", "data_points_saved",
                 "rows_skipped_null_cursor", "errors_unmapped", "rows_possibly_duplicated",
                 "lease_until", "rows_left")
"""Columns of `engage_runs` added after its first release (`add_missing_columns` adds every
declared column an older database lacks; tests build such a database from this list)."""

SETTLED = ("acked", "failed", "in_doubt")


def upsert(conn: Connection, table: sa.Table, values: list[dict[str, Any]],
            update: Sequence[str] = ()) -> None:
    """Insert rows; on a primary-key clash update the `update` columns (or keep the old row).
    Native ON CONFLICT on PostgreSQL and SQLite, delete-then-insert elsewhere."""
    if not values:
        return
    keys = [c.name for c in table.primary_key.columns]
    dialect = conn.dialect.name
    if dialect in ("postgresql", "sqlite"):
        insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
        if update:
            stmt = insert.on_conflict_do_update(
                index_elements=keys, set_={c: insert.excluded[c] for c in update})
        else:
            stmt = insert.on_conflict_do_nothing(index_elements=keys)
        conn.execute(stmt, values)
        return
    for value in values:
        match = [table.c[k] == value[k] for k in keys]
        if update:
            conn.execute(table.delete().where(*match))
        elif conn.scalar(sa.select(sa.func.count()).select_from(table).where(*match)):
            continue
        conn.execute(table.insert().values(**value))


def missing(conn: Connection) -> list[tuple[sa.Table, sa.Column[Any] | None]]:
    """The tables (column None) and columns this version declares that the database lacks."""
    inspector = sa.inspect(conn)
    found: list[tuple[sa.Table, sa.Column[Any] | None]] = []
    for table in metadata.sorted_tables:
        if not inspector.has_table(table.name):
            found.append((table, None))
            continue
        have = {c["name"] for c in inspector.get_columns(table.name)}
        found += [(table, column) for column in table.columns if column.name not in have]
    return found


def add_missing_columns(conn: Connection) -> list[str]:
    """Add the columns this version declares that an older state database lacks (each is
    nullable or has a server default, so existing rows stay valid), in the caller's
    transaction. Returns "table.column" of each added."""
    added: list[str] = []
    for table, column in missing(conn):
        if column is not None:
            kind = column.type.compile(dialect=conn.dialect)
            if column.server_default is not None:
                default = column.server_default.arg  # type: ignore[attr-defined]
                kind += f" NOT NULL DEFAULT {default}"
            else:
                assert column.nullable, f"{table.name}.{column.name} needs a default"
            conn.exec_driver_sql(
                f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}')
            added.append(f"{table.name}.{column.name}")
    return added


PAGE_SIZE = 16_384
"""The page size of a SQLite state file this release creates (SQLite's default is 4,096; a file
keeps the size it was created with, WAL mode allowing no change). A first diffed run writes
its whole field record at its end, a B-tree that needs a quarter of the pages with 16 KB pages,
so that end is shorter; events and a later run's lookups take the same time with either
(`benchmarks/README.md`, `helper_store.py`)."""


def sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """Every connection takes `field_store_sql.tune`'s settings (a lock waited for up to 30 s,
    syncs at checkpoints, deleted content zeroed only where it costs no I/O); a new database
    file takes `PAGE_SIZE` (before anything is written to it); the database is
    put in WAL mode (readers never wait for the writer) by the first connection that can:
    switching needs the database to itself, which another process migrating or writing may
    hold, so a connection that finds it busy tries a few times, then goes on (the next one
    switches it; WAL persists)."""
    cur = dbapi_conn.cursor()
    tune(cur.execute)  # the lock's wait first: switching to WAL may find the database busy
    cur.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file's; an existing one keeps its own
    for attempt in range(20):
        try:
            if cur.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() == "wal":
                break
        except sqlite3.OperationalError:  # "database is locked": someone is writing
            time.sleep(0.05 * (attempt + 1))
    cur.close()
