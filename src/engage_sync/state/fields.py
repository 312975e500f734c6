"""The field record's SQL: log, fold, look up and forget what the service acknowledged per user.

The record is two tables (`state_schema`): `engage_fields`, one row per (integration, user)
keyed by a hash, and `engage_field_log`, the deltas settled since the last fold, in order.

Why a log: user keys are hashes, so writing each acknowledged user straight into the keyed
table modifies one random page of a large B-tree per user, and SQLite writes every modified
page to its WAL at every commit, a cost that grows with the table. Appending to the log is
sequential and cheap; a fold then writes the keyed table once, in key order.

The functions taking a `Connection` run inside `StateStore`'s transactions; `FieldRecord` is
the store's part that opens them (a mixin using only `self.engine`). Invariants:
- `log` is called in the transaction that settles the requests the deltas come from, so a
  delta is logged if and only if its acknowledgement is settled;
- the record of a user is its `engage_fields` row with the user's logged deltas applied in
  log order (`seq`). A *fresh* delta (`FRESH`: the user had no record when its batch was
  looked up, nor an item of the run pending) is the user's whole record; a `MERGE` delta is
  applied on top (an acknowledgement never erases an attribute the object did not carry);
- `fold` moves every logged delta of an integration into `engage_fields` and empties its log,
  in one transaction that excludes the integration's settles (SQLite: its first statement
  takes the write lock; PostgreSQL: an exclusive advisory lock, which settles take shared);
- `lookup` reads `engage_fields` only: the caller folds first when a user it looks up may
  have logged deltas (`diffing.Differ`);
- a lookup is one query per 900 users (a batch's users, never one query per row);
- whole records a first run's helper process kept (`field_helper`) are written by `store`
  (or, on a SQLite file, `field_store_sql.store_sqlite_file`, whose pass takes that run's
  fresh deltas with them); their users are none of that run's log's, so they are written
  before or after its fold alike.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence

import xxhash
from sqlalchemy.engine import Connection, Engine

from engage_sync.state.field_codec import decode, encode, merged, user_key
from engage_sync.state.field_store_pg import may_copy, store_copied
from engage_sync.state.field_store_sql import store_attached_sql
from engage_sync.state.schema import field_log, fields

CHUNK = 900  # bind parameters per lookup: under SQLite's oldest limit (999)
LOG_ROWS = 224  # deltas per INSERT (4 parameters each, under 999): one statement, not one
# per row, so the settle releases and retakes the GIL a few times, not once a row (with the
# send threads running, each retake waits for them)
FOLD_ROWS = 5000  # logged merge deltas applied per round trip of a fold
ANALYZE_AFTER = 100_000  # PostgreSQL: a fold this large refreshes the planner's statistics
FRESH, MERGE = b"F", b"M"  # the first byte of `Item.fields`
UNKNOWN = 0  # the digest of a value the service may or may not hold (a request in doubt)


def unknown_fields(item_fields: bytes) -> bytes:
    """The `Item.fields` to record for an object whose request ended in doubt: each of its
    attributes with a digest no value has, so whatever is read for them next (a NULL too) is
    sent, as the service may hold the value or not."""
    return MERGE + encode(dict.fromkeys(decode(item_fields[1:]), UNKNOWN))


def _mark(conn: Connection) -> str:
    return "?" if conn.dialect.paramstyle == "qmark" else "%s"


def _lock(conn: Connection, integration: str, shared: bool) -> None:
    """PostgreSQL: order settles (shared) and folds (exclusive) of one integration."""
    if conn.dialect.name != "postgresql":
        return
    key = xxhash.xxh3_64_intdigest(f"engage_fields:{integration}".encode()) - (1 << 63)
    fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    conn.exec_driver_sql(f"SELECT {fn}(%s)", (key,))


def lookup(conn: Connection, integration: str, keys: Iterable[bytes]) -> dict[bytes, bytes]:
    """user key → digests blob in `engage_fields`, for the given keys that have a row.

    Here and below, plain SQL with the driver's placeholders (SQLite and PostgreSQL both
    know `ON CONFLICT`): compiling a 900-value IN list, or an executemany of thousands of
    rows, through SQLAlchemy costs as much as the database's own work.

    The rows are fetched from the driver's own cursor: SQLAlchemy's result rows cost more per
    row than the query itself, on every row an unchanged re-run looks up."""
    unique = sorted(set(keys))  # in key order: neighbouring probes share pages
    found: dict[bytes, bytes] = {}
    mark = _mark(conn)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        for i in range(0, len(unique), CHUNK):
            chunk = unique[i:i + CHUNK]
            cursor.execute(
                f"SELECT user_key, digests FROM {fields.name} WHERE integration = {mark} "
                f"AND user_key IN ({', '.join([mark] * len(chunk))})", (integration, *chunk))
            found.update(cursor.fetchall())
    finally:
        cursor.close()
    if found and not isinstance(next(iter(found.values())), bytes):  # a driver's memoryview
        found = {bytes(k): bytes(v) for k, v in found.items()}
    return found


def log(conn: Connection, integration: str, deltas: Sequence[tuple[str, bytes]]) -> None:
    """Append (user, `FRESH` or `MERGE` + encoded delta) pairs to the log, in order."""
    if not deltas:
        return
    _lock(conn, integration, shared=True)
    row = "({0}, {0}, {0}, {0})".format(_mark(conn))
    for i in range(0, len(deltas), LOG_ROWS):
        chunk = deltas[i:i + LOG_ROWS]
        conn.exec_driver_sql(
            f"INSERT INTO {field_log.name} (integration, user_key, fresh, digests) VALUES "
            + ", ".join([row] * len(chunk)),
            tuple(v for user, blob in chunk
                  for v in (integration, user_key(user), blob[:1] == FRESH, blob[1:])))


def fold(conn: Connection, integration: str) -> int:
    """Apply the integration's logged deltas to `engage_fields` and empty its log; returns
    the number of deltas folded. Fresh deltas are written by one INSERT … SELECT in key order
    (the last one of a user wins: a second fresh delta is a whole record too); merge deltas
    are applied after them, in log order, on top of what is stored."""
    _lock(conn, integration, shared=False)
    mark = _mark(conn)
    latest = ("SELECT DISTINCT ON (user_key) integration, user_key, digests" if
              conn.dialect.name == "postgresql" else "SELECT integration, user_key, digests")
    order = "user_key, seq DESC" if conn.dialect.name == "postgresql" else "user_key, seq"
    conn.exec_driver_sql(  # SQLite: this first statement writes, so it takes the write lock
        f"INSERT INTO {fields.name} (integration, user_key, digests) {latest} "
        f"FROM {field_log.name} WHERE integration = {mark} AND fresh ORDER BY {order} "
        f"ON CONFLICT (integration, user_key) DO UPDATE SET digests = excluded.digests",
        (integration,))
    merges = conn.exec_driver_sql(
        f"SELECT user_key, digests FROM {field_log.name} WHERE integration = {mark} "
        f"AND NOT fresh ORDER BY user_key, seq", (integration,),
        execution_options={"stream_results": True, "max_row_buffer": FOLD_ROWS})
    for users in _grouped(merges.partitions(FOLD_ROWS)):
        stored = lookup(conn, integration, users)
        _write(conn, integration, {
            key: encode(_applied(stored.get(key), blobs)) for key, blobs in users.items()})
    folded = int(conn.exec_driver_sql(
        f"DELETE FROM {field_log.name} WHERE integration = {mark}", (integration,)).rowcount)
    refresh_statistics(conn, folded)
    return folded


def refresh_statistics(conn: Connection, written: int) -> None:
    """PostgreSQL, after `written` rows went into the record (a fold, a helper's store): at
    `ANALYZE_AFTER` or more, the planner's statistics are refreshed. Without them, the next
    lookups of a table just filled scan it whole, each a full pass over the record."""
    if written >= ANALYZE_AFTER and conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"ANALYZE {fields.name}")


def _grouped(parts: Iterable[Sequence[Sequence[bytes]]]) -> Iterator[dict[bytes, list[bytes]]]:
    """Rows (user key, delta) in key order → dicts of whole users' deltas, in log order; a
    user is never split between two dicts."""
    users: dict[bytes, list[bytes]] = {}
    for part in parts:
        for key, blob in part:
            users.setdefault(bytes(key), []).append(bytes(blob))
        last = bytes(part[-1][0])
        tail = users.pop(last)
        if users:
            yield users
        users = {last: tail}
    if users:
        yield users


def _applied(stored: bytes | None, blobs: list[bytes]) -> dict[int, int]:
    record = decode(stored) if stored is not None else None
    for blob in blobs:
        record = merged(record, decode(blob))
    return record or {}


def _write(conn: Connection, integration: str, records: dict[bytes, bytes]) -> None:
    mark = _mark(conn)
    conn.exec_driver_sql(
        f"INSERT INTO {fields.name} (integration, user_key, digests) VALUES ({mark}, {mark}, "
        f"{mark}) ON CONFLICT (integration, user_key) DO UPDATE SET digests = excluded.digests",
        [(integration, k, v) for k, v in sorted(records.items())])


def store(conn: Connection, integration: str, records: Iterable[tuple[bytes, bytes]]) -> int:
    """Write whole records (user key, encoded digests), in key order, over what is stored;
    returns how many."""
    written = 0
    batch: list[tuple[bytes, bytes]] = []
    for record in records:
        batch.append(record)
        if len(batch) == FOLD_ROWS:
            _write(conn, integration, dict(batch))
            written, batch = written + len(batch), []
    if batch:
        _write(conn, integration, dict(batch))
    return written + len(batch)


def store_attached(conn: Connection, integration: str, schema: str, table: str) -> int:
    """SQLite: `store` from a table (user_key, digests, in the order they were acknowledged)
    of an attached database, in one statement (`field_store_sql`)."""
    return int(conn.exec_driver_sql(store_attached_sql(schema, table), (integration,)).rowcount)


def any_recorded(conn: Connection, integration: str) -> bool:
    """Whether `engage_fields` holds any user of the integration."""
    return conn.exec_driver_sql(
        f"SELECT 1 FROM {fields.name} WHERE integration = {_mark(conn)} LIMIT 1",
        (integration,)).first() is not None


def logged(conn: Connection, integration: str) -> int:
    """How many deltas of the integration wait in the log."""
    return int(conn.exec_driver_sql(
        f"SELECT COUNT(*) FROM {field_log.name} WHERE integration = {_mark(conn)}",
        (integration,)).scalar_one())


def forget(conn: Connection, integration: str) -> int:
    """Drop an integration's whole record (and its log); returns the number of users
    forgotten."""
    fold(conn, integration)
    mark = _mark(conn)
    return int(conn.exec_driver_sql(
        f"DELETE FROM {fields.name} WHERE integration = {mark}", (integration,)).rowcount)


class FieldRecord:
    """The StateStore's methods for the field record, each in a transaction of its own."""

    engine: Engine

    def field_digests(self, integration: str, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """user key → the digests the service acknowledged (`field_diff.decode`)."""
        with self.engine.connect() as conn:
            return lookup(conn, integration, keys)

    def fold_fields(self, integration: str) -> int:
        """Move the integration's logged field digests into its record (`fold`); returns how
        many deltas were folded."""
        with self.engine.begin() as conn:
            return fold(conn, integration)

    def store_field_file(self, integration: str, path: str, table: str) -> int:
        """Write the whole records a helper kept in the SQLite file `path` (`table`: user_key,
        digests, appended in the order they were acknowledged: of a user's records the last
        wins) over the integration's record, in one transaction (on SQLite, one statement:
        the file is attached); returns how many were written."""
        if self.engine.dialect.name == "sqlite":
            with self.engine.connect() as conn:  # ATTACH and DETACH: outside a transaction
                conn.exec_driver_sql("ATTACH DATABASE ? AS helper", (path,))
                conn.commit()
                try:
                    written = store_attached(conn, integration, "helper", table)
                    conn.commit()
                finally:
                    conn.rollback()
                    conn.exec_driver_sql("DETACH DATABASE helper")
                    conn.commit()
                return written
        source = sqlite3.connect(path)
        try:
            with self.engine.begin() as conn:
                if may_copy(conn):
                    written = store_copied(conn.connection.dbapi_connection, integration,
                                           source, table)
                else:
                    written = store(conn, integration, source.execute(
                        f"SELECT user_key, digests FROM {table} ORDER BY user_key, rowid"))
                refresh_statistics(conn, written)
                return written
        finally:
            source.close()

    def has_field_record(self, integration: str) -> bool:
        """Whether the integration's folded field record holds any user."""
        with self.engine.connect() as conn:
            return any_recorded(conn, integration)

    def forget_fields(self, integration: str) -> int:
        """Forget what the service acknowledged for this integration: its next run sends
        every attribute. Returns the number of users forgotten."""
        with self.engine.begin() as conn:
            return forget(conn, integration)
