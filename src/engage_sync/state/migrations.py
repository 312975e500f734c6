"""The state database's schema, created or upgraded in place, by any number of processes at
once (a deployment's first two scheduled runs, a run and the status server).

Versions (`SCHEMA_VERSION`, kept in `engage_schema`):
- 0: a database from before versions: engage-sync's tables, no version row;
- 1: every table and column of `schema.metadata` (the columns added since the first release
  are added in place by `schema.add_missing_columns`).
A table or column added to `schema.metadata` later (nullable, or with a server default)
reaches every database at its next open without a new version: an open that finds anything
missing takes the lock and adds it.
A later release appends a step to `_STEPS`; each step runs once, in order, in the one
transaction that also records the new version.

Invariants:
- one process at a time creates or migrates: on PostgreSQL a transaction-scoped advisory lock
  is taken first, on SQLite the database's write lock (BEGIN IMMEDIATE); the others wait for
  it, then find the work done. A database already whole at this version takes no lock;
- nothing is ever dropped or recreated: tables are created where missing, columns added;
- a database at a version newer than this release knows is refused (StateSchemaError naming
  both versions) and left as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.errors import SyncError
from engage_sync.state.schema import add_missing_columns, metadata, missing, runs

SCHEMA_VERSION = 1

versions = sa.Table(
    "engage_schema", sa.MetaData(),
    sa.Column("version", sa.Integer, nullable=False),
)

_LOCK_ID = 0x656E6753  # pg_advisory_xact_lock key of the state schema ("engS")


class StateSchemaError(SyncError):
    """The state database's schema cannot be used by this release."""


def _to_1(conn: Connection) -> None:
    metadata.create_all(conn)  # checkfirst: only the tables a database lacks
    add_missing_columns(conn)


_STEPS: dict[int, Callable[[Connection], None]] = {1: _to_1}
"""version → the step that brings a database from the version before it."""


def version_of(conn: Connection) -> int | None:
    """The database's schema version: None for an empty database, 0 for one from before
    versions."""
    inspector = sa.inspect(conn)
    if inspector.has_table(versions.name):
        found = conn.scalar(sa.select(sa.func.max(versions.c.version)))
        if found is not None:
            return int(found)
    return 0 if inspector.has_table(runs.name) else None


def ensure_schema(engine: Engine) -> int:
    """Bring the state database to SCHEMA_VERSION (see the invariants); returns the version it
    had (None counts as 0). Raises StateSchemaError for a newer database."""
    with engine.connect() as conn:
        seen = version_of(conn)
        whole = seen == SCHEMA_VERSION and not missing(conn)
        conn.rollback()
    if whole:
        return SCHEMA_VERSION
    _refuse_newer(engine, seen)
    with engine.connect() as conn:
        _lock(conn)
        seen = version_of(conn)  # what it is now that no one else migrates
        _refuse_newer(engine, seen)
        for step in range(seen or 0, SCHEMA_VERSION):
            _STEPS[step + 1](conn)
        if seen == SCHEMA_VERSION:  # no step ran: a table or column declared since, added
            _to_1(conn)
        if seen != SCHEMA_VERSION:
            versions.create(conn, checkfirst=True)
            conn.execute(versions.delete())
            conn.execute(versions.insert().values(version=SCHEMA_VERSION))
        conn.commit()
    return seen or 0


def _lock(conn: Connection) -> None:
    """Open the migration's transaction holding the database's migration lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_ID})
    elif conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _refuse_newer(engine: Engine, seen: int | None) -> None:
    if seen is not None and seen > SCHEMA_VERSION:
        raise StateSchemaError(
            f"the state database at {engine.url.render_as_string(hide_password=True)} has "
            f"schema version {seen}, newer than this release's {SCHEMA_VERSION}: it was "
            "upgraded by a later engage-sync; run that release (nothing was changed)")
