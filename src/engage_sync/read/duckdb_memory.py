"""DuckDB's memory given back to the system between the large statements of a run.

Why: DuckDB's allocator keeps what a statement freed, up to its memory limit, for the next
one; in a snapshot run the comparison, the read of the pending rows and the move of the
snapshot would each add their peak to what the one before kept. Setting the memory limit
again, to the value it holds, flushes those caches (DuckDB gives up evictable blocks and its
allocator's free memory), so each phase peaks on its own. A no-op elsewhere than DuckDB.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection


def give_back(conn: Connection) -> None:
    """Flush DuckDB's cached memory on `conn`'s database; the limit itself is unchanged."""
    if conn.dialect.name != "duckdb":
        return
    limit = conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar()
    conn.exec_driver_sql(f"SET memory_limit = '{limit}'")
