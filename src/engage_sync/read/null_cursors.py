"""Rows whose cursor value (`UPDATED_AT`) is NULL: never silently lost.

A window selects rows by their cursor value, so a row with a NULL one is in no window and is
never read. The rule:
- with `null_cursor: skip` (the default) every run counts the source's rows with a NULL cursor
  in its record (`rows_skipped_null_cursor`) and warns once, naming the column; they are not
  part of `rows_read` (they are counted again by every run while they stay NULL);
- with `null_cursor: oldest` they are read as if their cursor were `extract.OLDEST`
  (1970-01-01 UTC), for tables that have them by design: the first run (or a full resync)
  reads them like any other row, and the count is 0.
"""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine

from engage_sync.config.integration import Integration
from engage_sync.read.extract import count_null_cursors
from engage_sync.read.source_spec import SourceSpec
from engage_sync.state.store import StateStore

log = logging.getLogger("engage_sync.read.null_cursors")

COUNT = "rows_skipped_null_cursor"


def count_skipped(integration: Integration, engine: Engine, spec: SourceSpec,
                  state: StateStore, run_id: str) -> int:
    """Count the rows this run cannot read for a NULL cursor, record it on the run, warn once
    if there are any. Returns the count."""
    if spec.null_cursor_oldest:
        return 0
    skipped = count_null_cursors(engine, spec)
    state.set_run_count(run_id, COUNT, skipped)
    if skipped:
        log.warning(
            "integration %s: %d rows have a NULL %s and are never read; give them a value, or "
            "set `null_cursor: oldest` to read them as the oldest rows",
            integration.name, skipped, integration.cursor_column)
    return skipped
