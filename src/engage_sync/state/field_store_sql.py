"""The SQL that writes whole records kept in an attached SQLite table over an integration's
field record. Shared by the state store and a first run's helper process, which runs it on a
SQLite state database with the standard library alone (no SQLAlchemy: half a second of CPU
and of the run's end). No import but the standard library's.

The table holds (user_key, digests) appended in the order they were acknowledged; the rows are
written sorted by key, then by rowid, so that the last of a user's records wins."""

from __future__ import annotations

import sqlite3

FIELDS_TABLE = "engage_fields"  # the name `state.schema.fields` is declared with
BUSY_MS = 30_000  # every state connection waits this long for a lock (`schema.sqlite_pragmas`)
SYNCHRONOUS = "NORMAL"  # and syncs at this level (WAL: at checkpoints, not every commit)


def store_attached_sql(schema: str, table: str) -> str:
    """The one statement (its parameter: the integration)."""
    return (f"INSERT INTO {FIELDS_TABLE} (integration, user_key, digests) SELECT ?, user_key, "
            f"digests FROM {schema}.{table} WHERE true ORDER BY user_key, rowid "
            "ON CONFLICT (integration, user_key) DO UPDATE SET digests = excluded.digests")


def store_sqlite_file(state_file: str, integration: str, path: str, table: str) -> int:
    """The records of `table` in the SQLite file `path` over the integration's record in the
    SQLite state database `state_file` (already created, in WAL mode), in one transaction;
    returns how many were written."""
    db = sqlite3.connect(state_file, isolation_level=None)
    try:
        db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
        db.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
        db.execute("ATTACH DATABASE ? AS helper", (path,))
        db.execute("BEGIN IMMEDIATE")
        try:
            written = db.execute(store_attached_sql("helper", table), (integration,)).rowcount
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("DETACH DATABASE helper")
        return int(written)
    finally:
        db.close()
