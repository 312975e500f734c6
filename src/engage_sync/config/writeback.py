"""The `writeback` section: where a run's record and its rows' outcomes are written in the
user's warehouse (the tables `engage_sync_runs` and `engage_sync_row_outcomes`).

`url` defaults to the integration's own warehouse (with its `connect_args`); it may hold
`${ENV_VAR}` references, expanded at run time. `schema` defaults to the connection's own.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from engage_sync.config.sections import Frozen

RUNS_TABLE = "engage_sync_runs"
OUTCOMES_TABLE = "engage_sync_row_outcomes"
OUTCOME_COLUMNS = ("run_id", "integration", "row_key", "outcome", "reason", "tries",
                   "retry_state", "recorded_at", "written_at")
"""The outcome table's own columns; the declared key columns follow, named as in the
source."""


class Writeback(Frozen):
    url: str | None = None
    connect_args: dict[str, Any] | None = None
    """With `url`: handed to the driver as `warehouse.connect_args` are (references
    expanded); without `url`, the warehouse's own are used."""
    schema_name: str | None = Field(default=None, alias="schema", min_length=1, max_length=100)


def key_column_clash(key_columns: tuple[str, ...]) -> str | None:
    """Why the declared key columns cannot be columns of the outcome table, or None."""
    clash = sorted({c for c in key_columns if c.lower() in OUTCOME_COLUMNS})
    if not clash:
        return None
    return (f"'writeback': the key column(s) {', '.join(clash)} share a name with a column of "
            f"{OUTCOMES_TABLE} ({', '.join(OUTCOME_COLUMNS)}); rename them in a "
            "'source.query' (and 'row_key')")
