"""Logging of the `engage-sync` command: one stream on stderr, quiet about what is expected.

- Expected failures (see failures.py) are logged without their traceback unless `--debug`: the
  command ends with one line saying what failed and how to fix it. Other handlers (Prefect's
  API log handler, which feeds the UI) still get the full record.
- httpx and httpcore log one line per request at INFO: at INFO and above they are set to
  WARNING, so a run's progress lines are not drowned; `--log-level DEBUG` shows them again.
- A failure is said once, by the command's last line: Prefect's own lines about it (a flow
  or task run "Finished in state Failed(...)", the exception of an expected failure) are left
  out of stderr, and still reach the flow run's logs.
- `--debug` keeps every traceback.
"""

from __future__ import annotations

import logging

from engage_sync.adapters.failures import expected

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CHATTY = ("httpx", "httpcore")
# "Still processing items" at exit: Prefect draining its event queue, not a problem to report
DRAINING = "EventsWorker"


class BriefFormatter(logging.Formatter):
    """Formats records of expected failures without their traceback; leaves the record as it
    found it, so handlers after this one format it in full."""

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not expected(exc):
            return super().format(record)
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text = saved


class SaidOnce(logging.Filter):
    """Leaves out Prefect's lines that repeat a failure the command's last line states."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("prefect"):
            return True
        if record.getMessage().startswith(FAILED):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        return exc is None or not expected(exc)


FAILED = "Finished in state Failed("


def configure(level: str, *, debug: bool) -> None:
    """Root logging for one command run."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT) if debug else BriefFormatter(FORMAT))
    if not debug:
        handler.addFilter(SaidOnce())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    if logging.getLogger().level > logging.DEBUG:
        for name in CHATTY:
            logging.getLogger(name).setLevel(logging.WARNING)
        logging.getLogger(DRAINING).setLevel(logging.ERROR)
