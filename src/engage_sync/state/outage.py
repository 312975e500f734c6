"""A state database that cannot be reached or written, told in one line.

`watch` hooks `translate` onto the state engine (SQLAlchemy's `handle_error`): a connection
lost or refused (PostgreSQL stopped, restarting or out of reach) and a SQLite file that
cannot be written (the disk under it full, an I/O error) raise `StateUnavailable`, which
names the database by host:port or file, never its user or password, and says that the next
run resumes. Every other error stays the driver's own (a bug keeps its traceback), and a
failed pool pre-ping is left to the pool, which replaces the connection itself.

What it leaves is the loop's rule (`run/loop.py`): the run stops where it was and writes
nothing more, so its journal holds exactly what was settled before; the next run resumes it
as after a crash, and what was in flight follows the in-doubt policy.
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from sqlalchemy.engine import Engine, ExceptionContext

from engage_sync.errors import StateUnavailable

_SQLITE_FULL, _SQLITE_IOERR, _SQLITE_CANTOPEN = 13, 10, 14  # primary result codes


def watch(engine: Engine) -> None:
    """Translate the engine's outages into StateUnavailable (once per engine)."""
    if not sa.event.contains(engine, "handle_error", translate):
        sa.event.listen(engine, "handle_error", translate)


def translate(ctx: ExceptionContext) -> StateUnavailable | None:
    """StateUnavailable for an outage of the state database, else None (left as it is)."""
    if ctx.is_pre_ping:
        return None
    error = ctx.original_exception
    if isinstance(error, sqlite3.Error):
        return _sqlite(ctx, error)
    dbapi = ctx.dialect.loaded_dbapi
    lost = ctx.is_disconnect or (ctx.connection is None and isinstance(
        error, dbapi.OperationalError | dbapi.InterfaceError))
    if not lost:
        return None
    url = ctx.engine.url if ctx.engine is not None else None
    where = f"{url.host or 'localhost'}:{url.port or 5432}" if url is not None else "its URL"
    return StateUnavailable(
        f"the state database at {where} is unreachable: {first_line(error)}; nothing settled "
        "is lost, and the next run resumes once the database answers again")


def _sqlite(ctx: ExceptionContext, error: sqlite3.Error) -> StateUnavailable | None:
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF
    if code not in (_SQLITE_FULL, _SQLITE_IOERR, _SQLITE_CANTOPEN):
        return None  # "database is locked" and the like: not an outage of the disk
    path = ctx.engine.url.database if ctx.engine is not None else None
    what = ("the disk under it is full: free space there" if code == _SQLITE_FULL
            else "check the disk under it")
    return StateUnavailable(
        f"the state database {path or '(SQLite)'} cannot be written: {first_line(error)}; "
        f"{what}; nothing settled is lost, and the next run resumes")


def first_line(error: BaseException) -> str:
    """The driver's message, first line, at most 300 characters (no URL is in it)."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__
