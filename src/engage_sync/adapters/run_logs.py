"""engage-sync's own log lines in the flow run's logs, where a team reads a run in the Prefect
UI: a request retried or given up (naming the service and what it answered), a write-back that
failed, a DuckDB file waited for, where the run was pinned.

Prefect ships only its own loggers' records to its API (and those named by
`PREFECT_LOGGING_EXTRA_LOGGERS`, when set before Prefect configures logging, which a flow
imported by a worker cannot count on); and it finds a record's flow run in the context of the
thread that logged it, which the run's sending threads do not have.

Invariants: while `shipped` is open, every record of the `engage_sync` loggers at INFO or above
(the level is lowered to INFO for its duration if it was higher) goes to the flow run's logs,
whichever thread logged it, as the flow run's own thread would send it (its run context and
settings: `_RunHandler`); nothing else changes for other handlers; the handler is removed and
the level restored when it closes. The
lines carry what engage-sync logs anyway: never a secret, never a payload value.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prefect.logging.handlers import APILogHandler

LOGGER = "engage_sync"


class _RunHandler(APILogHandler):
    """Prefect's API handler, emitting each record in a copy of the context it was made in:
    the flow run's, whichever thread logs (Prefect finds a record's flow run and its API's URL
    in the logging thread's context, and a sending thread has neither)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self._context = contextvars.copy_context()

    def emit(self, record: logging.LogRecord) -> None:
        self._context.copy().run(super().emit, record)


def _in_a_run() -> bool:
    from prefect.context import get_run_context
    from prefect.exceptions import MissingContextError

    try:
        get_run_context()
    except MissingContextError:
        return False
    return True


@contextmanager
def shipped() -> Iterator[None]:
    """engage-sync's records of INFO and above to the calling thread's flow run's logs while
    open; nothing when it is in no flow run (the pipeline called without Prefect)."""
    if not _in_a_run():
        yield
        return
    logger = logging.getLogger(LOGGER)
    level = logger.level
    handler = _RunHandler()
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
