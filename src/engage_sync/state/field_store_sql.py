"""The SQL that writes whole records kept in an attached SQLite table over an integration's
field record. Shared by the state store and a first run's helper process, which runs it on a
SQLite state database with the standard library alone (no SQLAlchemy, whose import would
lengthen the run's end). No import but the standard library's.

The table holds (user_key, digests) appended in the order they were acknowledged; the rows are
written sorted by key, then by rowid, so that the last of a user's records wins. On a first run
the integration's fresh deltas in the state's field log (the run's own users, none of the
helper's) may go in the same sorted pass (`with_log`): the record is then written in one pass
into an empty range of its B-tree, where after a fold of them every page would be split
anew (`benchmarks/helper_store.py`, figures in benchmarks/README.md)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any

FIELDS_TABLE = "engage_fields"  # the name `state.schema.fields` is declared with
FIELD_LOG_TABLE = "engage_field_log"  # and `state.schema.field_log`
BUSY_MS = 30_000  # every state connection waits this long for a lock (`schema.sqlite_pragmas`)
SYNCHRONOUS = "NORMAL"  # and syncs at this level (WAL: at checkpoints, not every commit)
SECURE_DELETE = "FAST"
"""and zeroes deleted content only where that writes no more pages. Some builds (Debian's) turn
`secure_delete` on, which also writes every page a delete frees and so makes a run's journal
compaction cost more CPU (`benchmarks/compact_cpu.py`). The state
holds no secret (row keys, key values, cursors, digests); what a delete leaves on freed pages
(the key values compaction clears, pruned row errors) stays in the file until SQLite reuses
the pages or a VACUUM, while the same keys stay in the live journal's merged entries."""


def tune(execute: Callable[[str], Any]) -> None:
    """The settings every connection to a SQLite state database takes (but its journal mode,
    `schema.sqlite_pragmas`), through `execute` (a DB-API cursor's or connection's)."""
    for pragma in (f"busy_timeout={BUSY_MS}", f"synchronous={SYNCHRONOUS}",
                   f"secure_delete={SECURE_DELETE}"):
        execute(f"PRAGMA {pragma}")


def store_attached_sql(schema: str, table: str, with_log: bool = False) -> str:
    """The one statement (its parameter: the integration; twice `with_log`: with the
    integration's fresh deltas of the main database's field log, each user's last)."""
    source = f"{schema}.{table}"
    order = "user_key, rowid"
    if with_log:
        source = (f"(SELECT user_key, 0 AS part, seq AS n, digests FROM main.{FIELD_LOG_TABLE} "
                  f"WHERE integration = ? AND fresh UNION ALL SELECT user_key, 1, rowid, "
                  f"digests FROM {source})")
        order = "user_key, part, n"
    return (f"INSERT INTO {FIELDS_TABLE} (integration, user_key, digests) SELECT ?, user_key, "
            f"digests FROM {source} WHERE true ORDER BY {order} "
            "ON CONFLICT (integration, user_key) DO UPDATE SET digests = excluded.digests")


def usable_cpus(affinity: int | None = None, cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The CPUs this process may keep busy: `affinity` (how many it may run on; default its
    own affinity's, or every CPU where there is none), fewer under a cgroup v2 CPU quota
    (`cpu_max`: "QUOTA PERIOD", or "max PERIOD" for none), rounded up. Unreadable or
    malformed: `affinity`."""
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
    try:
        with open(cpu_max, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            return max(1, min(affinity, -(-int(quota) // int(period))))
    except (OSError, ValueError, ZeroDivisionError):
        pass
    return affinity


def sorter_threads(cpus: int) -> int:
    """Threads SQLite's sorter may add to the writer's own (`PRAGMA threads`) on `cpus` CPUs:
    one fewer than them, at most 3: a helper thread shortens the sort only on a CPU of its
    own, and on a shared one lengthens it (`benchmarks/helper_store.py`)."""
    return max(0, min(cpus, 4) - 1)


def store_sqlite_file(state_file: str, integration: str, path: str, table: str,
                      threads: int = 0, with_log: bool = False,
                      committed: Callable[[int], None] | None = None) -> int:
    """The records of `table` in the SQLite file `path` over the integration's record in the
    SQLite state database `state_file` (already created, in WAL mode), in one transaction,
    sorted with `threads` more threads (`sorter_threads`); `with_log`: the integration's fresh
    logged deltas too, taken out of the log (its merge deltas stay, for a fold on top).
    Returns how many were written.

    `committed(written)`, if given, is called once the transaction is committed and before
    the WAL it filled is checkpointed into the database file (on this connection: its commit
    does not checkpoint), so that a caller may say the record is written while the copy goes
    on: the WAL holds the whole record, and copying it is a visible part of a first run's end
    (`benchmarks/helper_store.py`)."""
    db = sqlite3.connect(state_file, isolation_level=None)
    try:
        tune(db.execute)
        db.execute(f"PRAGMA threads={int(threads)}")
        if committed is not None:
            db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("ATTACH DATABASE ? AS helper", (path,))
        db.execute("BEGIN IMMEDIATE")
        try:
            written = db.execute(store_attached_sql("helper", table, with_log),
                                 (integration,) * (1 + with_log)).rowcount
            if with_log:
                db.execute(f"DELETE FROM {FIELD_LOG_TABLE} WHERE integration = ? AND fresh",
                           (integration,))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("DETACH DATABASE helper")
        if committed is not None:
            committed(int(written))
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return int(written)
    finally:
        db.close()
