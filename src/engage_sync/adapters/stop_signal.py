"""SIGTERM, an orchestrator's request to stop, as a graceful stop of `engage-sync run`.

Invariants:
- the handler only sets the run's `StopRequest` and starts a watchdog; the run stops at its next
  check (`run.stop`): no new batch or request, those in flight settled, resumable;
- the process ends within `StopRequest.grace` seconds of the signal (the run's attempt timeout
  + 5 s): if the run has not stopped by then, the watchdog ends it at once with one line, as a
  kill would, which the journal makes safe (what was in flight is in doubt, the next run
  resumes);
- a second SIGTERM ends the process at once (the handler found before is back after the first),
  and so does the first one while no run watches the request (opening, a dry run, partitions);
- outside the main thread (where no handler can be installed) nothing is installed.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from engage_sync.run.stop import StopRequest

EXIT_STOPPED = 143  # 128 + SIGTERM: what a shell reports for a process ended by it


def _end_now(grace: float) -> None:
    os.write(2, (f"engage-sync: not stopped {grace:g} s after SIGTERM: ending now; the next "
                 "run resumes (what was in flight is in doubt)\n").encode())
    os._exit(EXIT_STOPPED)


@contextmanager
def stop_on_sigterm() -> Iterator[StopRequest]:
    """A StopRequest that SIGTERM sets while the context lasts (and a run arms it)."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    found = signal.getsignal(signal.SIGTERM)

    def handle(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, found)  # a second SIGTERM: as without this handler
        if stop.grace is None:  # no run watches it (yet, or in this path): as without it
            signal.raise_signal(signal.SIGTERM)
            return
        stop.set("SIGTERM")
        watchdog = threading.Timer(stop.grace, _end_now, (stop.grace,))
        watchdog.daemon = True
        watchdog.start()

    signal.signal(signal.SIGTERM, handle)
    try:
        yield stop
    finally:
        if signal.getsignal(signal.SIGTERM) is handle:
            signal.signal(signal.SIGTERM, found)
