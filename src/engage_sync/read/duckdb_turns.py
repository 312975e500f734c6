"""DuckDB engines take turns to open and close a file: within a process, and with other
processes.

- Within a process: DuckDB shares one database instance per file. When one engine closes its
  last connection to a file while another engine opens the same file, the opening fails with
  "Unique file handle conflict". This happens when partitions in threads start and finish
  side by side. Invariant: every connect of a DuckDB engine made through `take_turns`, and
  every disposal made through `release`, holds one process-wide lock.
- Between processes: DuckDB lets one process open a file for writing. Scheduled runs of
  several integrations of one file start together, and all but one would fail with "Could not
  set lock on file". Invariant: a connect that meets another process's lock retries, with the
  process lock released between tries, until `lock_wait` seconds have passed since its first
  failed try; then the driver's error is raised with the wait added to its message. Such a
  wait is expected, so it is said once, at INFO (the error at its end is the run's failure).
- Kept open (`kept_open`, a folder's runs): opening a file loads its database, which costs a
  short run more than its read; while a `kept_open` scope is active, the first connect to a
  file (with given settings) also opens one more connection that the scope's end closes, so
  later engines of that file connect to the loaded database. It holds the file's lock for the
  scope, as the scope's runs would between them, except while a run's partitions in other
  processes read the file (`let_go`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa

log = logging.getLogger("engage_sync.read")

_TURN = threading.Lock()
_LOCKED = "could not set lock on file"
T = TypeVar("T")


@dataclass
class _KeptFiles:
    """The connections `kept_open` holds, by file and settings; guarded by `_TURN`."""

    scopes: int = 0
    held: dict[str, Any] = field(default_factory=dict)


_KEPT = _KeptFiles()


@contextmanager
def kept_open() -> Iterator[None]:
    """While active (in any thread), each DuckDB file connected to stays open (see above)."""
    with _TURN:
        _KEPT.scopes += 1
    try:
        yield
    finally:
        with _TURN:
            _KEPT.scopes -= 1
            ended = _KEPT.scopes == 0
        if ended:
            let_go()


def let_go() -> None:
    """Close what `kept_open` holds now (other processes are about to open the files); a later
    connect in the scope keeps its file again."""
    with _TURN:
        held, _KEPT.held = _KEPT.held, {}
        for conn in held.values():
            conn.close()


def _connect(dialect: Any, cargs: Any, cparams: Any) -> Any:
    """A connection (the caller holds `_TURN`); in a `kept_open` scope, the file kept open."""
    conn = dialect.connect(*cargs, **cparams)
    if _KEPT.scopes:
        key = repr((cargs, sorted(cparams.items(), key=repr)))
        if key not in _KEPT.held:
            _KEPT.held[key] = dialect.connect(*cargs, **cparams)
    return conn


def take_turns(engine: sa.Engine, lock_wait: float = 0.0) -> None:
    """Make a DuckDB engine's connects wait for the process's other opens and closes, and for
    another process's lock on the file for up to `lock_wait` seconds."""

    def connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        def once() -> Any:
            with _TURN:
                return _connect(dialect, cargs, cparams)

        return waiting_for_lock(once, lock_wait)

    sa.event.listen(engine, "do_connect", connect)


def locked_elsewhere(exc: BaseException) -> bool:
    """Whether a DuckDB connect failed because another process holds the file's lock."""
    return _LOCKED in str(exc).lower()


def waiting_for_lock(connect: Callable[[], T], lock_wait: float, *,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> T:
    """`connect()`, tried again while another process holds the file's lock, for up to
    `lock_wait` seconds from the first failed try (pauses of 0.05 s doubling to 1 s); any other
    error, or the lock still held, raises at once."""
    deadline: float | None = None
    pause = 0.05
    while True:
        try:
            return connect()
        except Exception as exc:
            if not locked_elsewhere(exc):
                raise
            now = clock()
            if deadline is None:
                deadline = now + lock_wait
                if lock_wait > 0:  # expected (runs of one file take turns): INFO, once a wait
                    log.info("the DuckDB file is held by another process; waiting up to %g s "
                             "for it (warehouse.lock_wait_seconds)", lock_wait)
            if now >= deadline:
                longer = _waited(exc, lock_wait)
                if longer is exc:
                    raise
                raise longer from exc
            sleep(min(pause, deadline - now))
            pause = min(pause * 2, 1.0)


def _waited(exc: Exception, lock_wait: float) -> Exception:
    """The driver's error, of its own type, its message led by the wait (a first line may be
    cut short where it is shown, and the driver's message ends with a path and a link)."""
    if lock_wait <= 0:
        return exc
    try:
        return type(exc)(f"after waiting {lock_wait:g} s: {exc}")
    except Exception:  # an error type that wants other arguments: the driver's own
        return exc


def release(engine: sa.Engine) -> None:
    """Dispose of a warehouse engine; a DuckDB one in turn with the process's opens."""
    if engine.dialect.name != "duckdb":
        engine.dispose()
        return
    with _TURN:
        engine.dispose()
