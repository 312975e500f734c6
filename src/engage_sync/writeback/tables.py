"""The write-back tables in the user's warehouse, in SQLAlchemy Core (any dialect): what their
columns are, and their rows built from a run row and its outcome rows.

Invariants:
- `engage_sync_runs` holds one row per run: its status record's counts and times (UTC);
- `engage_sync_row_outcomes` holds one row per row outcome that was not a plain success
  (a user who left the source and was cleared or deleted is one: `left`),
  with the declared key columns as they are in the source (a payload key column as the MD5
  of its text, as the warehouse's md5() computes it), so it joins to the source by key; it
  never holds a payload value (a reason names fields, never values);
- a key column is typed after its values (`column_type`), and added to the table when
  missing: the table grows one column per key column name of the integrations writing to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from engage_sync.config.writeback import OUTCOMES_TABLE, RUNS_TABLE
from engage_sync.state.writebacks import OutcomeRow

OUTCOME_OF_KIND = {"rejected": "rejected", "failed": "failed", "in_doubt": "in_doubt",
                   "duplicate": "possibly_duplicated", "unmapped": "unmapped_error",
                   "left": "left"}
"""The `outcome` column's value for each kind of row error."""

RUN_COUNTS = ("rows_read", "rows_synced", "rows_failed_with_errors", "rows_rejected",
              "rows_in_doubt", "rows_unchanged", "rows_skipped_null_cursor",
              "rows_possibly_duplicated", "errors_unmapped", "data_points_sent",
              "data_points_saved", "rows_left")
"""The record's counts (`status.record.record`), one column each."""


def runs_table(metadata: sa.MetaData, schema: str | None) -> sa.Table:
    return sa.Table(
        RUNS_TABLE, metadata,
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("integration", sa.String(100), nullable=False),
        sa.Column("seq", sa.Integer),
        sa.Column("mode", sa.String(20)),
        sa.Column("job_status", sa.String(20), nullable=False),
        sa.Column("sync_start_time", sa.DateTime),
        sa.Column("sync_finish_time", sa.DateTime),
        sa.Column("last_timestamp_synced", sa.Text),
        *(sa.Column(name, sa.BigInteger) for name in RUN_COUNTS),
        sa.Column("message", sa.Text),
        sa.Column("written_at", sa.DateTime, nullable=False),
        schema=schema)


def outcomes_table(metadata: sa.MetaData, schema: str | None,
                   key_columns: Sequence[tuple[str, sa.types.TypeEngine[Any]]]) -> sa.Table:
    return sa.Table(
        OUTCOMES_TABLE, metadata,
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("integration", sa.String(100), nullable=False),
        *(sa.Column(name, kind) for name, kind in key_columns),
        sa.Column("row_key", sa.Text),
        sa.Column("outcome", sa.String(30), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("tries", sa.Integer),
        sa.Column("retry_state", sa.String(10)),
        sa.Column("recorded_at", sa.DateTime),
        sa.Column("written_at", sa.DateTime, nullable=False),
        schema=schema)


def add_column_sql(dialect: sa.Dialect, table: sa.Table, name: str,
                   kind: sa.types.TypeEngine[Any]) -> str:
    """`ALTER TABLE … ADD COLUMN …` in the dialect's own quoting and type names."""
    prep = dialect.identifier_preparer
    return (f"ALTER TABLE {prep.format_table(table)} ADD COLUMN {prep.quote(name)} "
            f"{kind.compile(dialect=dialect)}")


def column_type(values: Iterable[Any]) -> sa.types.TypeEngine[Any]:
    """The SQL type of a key column after its first value that is not NULL (text when all
    are NULL)."""
    for value in values:
        if value is None:
            continue
        if isinstance(value, bool):
            return sa.Boolean()
        if isinstance(value, int):
            return sa.BigInteger()
        if isinstance(value, float):
            return sa.Float()
        if isinstance(value, Decimal):
            return sa.Numeric(38, 10)
        if isinstance(value, datetime):
            return sa.DateTime(timezone=value.tzinfo is not None)
        if isinstance(value, date):
            return sa.Date()
        return sa.Text()
    return sa.Text()


def as_text(row: dict[str, Any], columns: frozenset[str]) -> dict[str, Any]:
    """The row with the values of `columns` (key columns a table already holds as text) as
    text: a date or time in ISO 8601, anything else as `str`."""
    for name in columns:
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            row[name] = value.isoformat() if isinstance(value, date) else str(value)
    return row


def utc(value: datetime | None) -> datetime | None:
    """A time as naive UTC (the tables' times are UTC)."""
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def run_row(run: dict[str, Any], record: dict[str, Any], written_at: datetime
            ) -> dict[str, Any]:
    """A run's row: the run row's times, the status record's counts."""
    return {"run_id": run["run_id"], "integration": run["integration"], "seq": run["seq"],
            "mode": run["mode"], "job_status": run["job_status"],
            "sync_start_time": utc(run["sync_start_time"]),
            "sync_finish_time": utc(run["sync_finish_time"]),
            "last_timestamp_synced": run["last_timestamp_synced"],
            **{name: record.get(name) for name in RUN_COUNTS},
            "message": run.get("message"), "written_at": written_at}


def outcome_row(run_id: str, integration: str, key_columns: Sequence[str], row: OutcomeRow,
                written_at: datetime) -> dict[str, Any]:
    """An outcome's row: the key values by column (NULL when not known: an error naming no
    row, or kept by an older version), never a payload value."""
    values = row.key_values if row.key_values is not None \
        and len(row.key_values) == len(key_columns) else (None,) * len(key_columns)
    return {"run_id": run_id, "integration": integration,
            **dict(zip(key_columns, values, strict=True)),
            "row_key": row.row_key, "outcome": OUTCOME_OF_KIND.get(row.kind, row.kind),
            "reason": row.reason, "tries": row.tries, "retry_state": row.retry_state,
            "recorded_at": utc(row.recorded_at), "written_at": written_at}
