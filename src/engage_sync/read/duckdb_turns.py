"""DuckDB engines of one process take turns to open and close a file.

DuckDB shares one database instance per file within a process. When one engine closes its
last connection to a file while another engine opens the same file, the opening fails with
"Unique file handle conflict". This happens when partitions in threads start and finish
side by side. Invariant: every connect of a DuckDB engine made by `wiring.warehouse_engine`,
and every disposal made through `release`, holds one process-wide lock.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa

_TURN = threading.Lock()


def take_turns(engine: sa.Engine) -> None:
    """Make a DuckDB engine's connects wait for the process's other opens and closes."""
    sa.event.listen(engine, "do_connect", _connect_in_turn)


def _connect_in_turn(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
    with _TURN:
        return dialect.connect(*cargs, **cparams)


def release(engine: sa.Engine) -> None:
    """Dispose of a warehouse engine; a DuckDB one in turn with the process's opens."""
    if engine.dialect.name != "duckdb":
        engine.dispose()
        return
    with _TURN:
        engine.dispose()
