"""DuckDB's memory given back to the system between the large statements of a run.

Why: DuckDB holds in memory what committed transactions changed until a checkpoint writes it
to the file, and its allocator keeps what a statement freed, up to the memory limit, for the
next one. In a snapshot run the comparison, the read of the pending rows and each part of the
snapshot's advance would each add their peak to what the ones before kept, past the limit.
A CHECKPOINT writes the changes out; setting the memory limit again, to the value it holds,
makes DuckDB give up its evictable blocks and its allocator's free memory. A no-op elsewhere
than DuckDB.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

log = logging.getLogger(__name__)


def give_back(conn: Connection) -> None:
    """Checkpoint `conn`'s DuckDB database and flush its cached memory; the limit itself is
    unchanged. Call it outside a transaction with changes (after a commit): DuckDB refuses to
    checkpoint inside one, and then only the flush is done."""
    if conn.dialect.name != "duckdb":
        return
    try:
        conn.exec_driver_sql("CHECKPOINT")
    except sa.exc.DBAPIError as exc:  # another connection's changes: the flush still helps
        log.debug("no checkpoint: %s", exc)
        conn.rollback()
    limit = conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar()
    conn.exec_driver_sql(f"SET memory_limit = '{limit}'")
    conn.commit()
