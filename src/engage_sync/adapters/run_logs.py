"""engage-sync's own log lines in the flow run's logs, where a team reads a run in the Prefect
UI: a request retried or given up (naming the service and what it answered), a failed
write-back, a DuckDB file waited for.

Prefect ships only its own loggers' records to its API (and those named by
`PREFECT_LOGGING_EXTRA_LOGGERS`, when set before Prefect configures logging, which a flow
imported by a worker cannot count on); and it finds a record's flow run, and the API to send
it to, in the context of the thread that logged it. The run's sending threads get the context
of the thread that submitted each request (`run.send_loop`); other threads of a run (the
lease's heartbeat, the field helper's writer) have none.

Invariants:
- while any `shipped` is open, one handler on the `engage_sync` logger sends its records to
  the API: a record logged in a run context goes to that run (a partition's task run, for its
  sending threads too); one logged by a thread without goes to the oldest run still open in
  the process (the flow run, where partitions run in its threads; in a Dask worker, one of the
  flow run's partitions; when flow runs overlap in one process, which a served or CLI process
  never does, it may be another's);
- what is shipped is what the process logs: the logger's level and the other handlers are
  untouched (a served run logs WARNING and above by Prefect's default, `engage-sync run`
  INFO and above, by `--log-level`);
- nothing is added where Prefect already ships the logger (PREFECT_LOGGING_EXTRA_LOGGERS);
- the lines carry what engage-sync logs anyway: never a secret, never a payload value.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from prefect.logging.handlers import APILogHandler

LOGGER = "engage_sync"


def _in_a_run() -> bool:
    from prefect.context import get_run_context
    from prefect.exceptions import MissingContextError

    try:
        get_run_context()
    except MissingContextError:
        return False
    return True


class _RunsHandler(APILogHandler):
    """Prefect's API handler; a record from a thread with no run context is emitted in a copy
    of the context of the oldest open run."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[contextvars.Context] = []  # the open `shipped`, oldest first

    def emit(self, record: logging.LogRecord) -> None:
        runs = self.runs
        if runs and not _in_a_run():
            runs[0].copy().run(super().emit, record)
        else:
            super().emit(record)


_HANDLER = _RunsHandler()
_LOCK = threading.Lock()


@contextmanager
def shipped() -> Iterator[None]:
    """engage-sync's records to the calling thread's flow run's logs while open; nothing when
    it is in no flow run (the pipeline called without Prefect)."""
    logger = logging.getLogger(LOGGER)
    if not _in_a_run() or any(isinstance(h, APILogHandler) and h is not _HANDLER
                              for h in logger.handlers):
        yield
        return
    run = contextvars.copy_context()
    with _LOCK:
        _HANDLER.runs = [*_HANDLER.runs, run]
        if len(_HANDLER.runs) == 1:
            logger.addHandler(_HANDLER)
    try:
        yield
    finally:
        with _LOCK:
            _HANDLER.runs = [r for r in _HANDLER.runs if r is not run]
            if not _HANDLER.runs:
                logger.removeHandler(_HANDLER)
