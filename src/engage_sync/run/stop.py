"""A request to stop a run gracefully (an orchestrator's SIGTERM), and what the run checks.

Invariants:
- once set it stays set, with the reason first given;
- after it is set no request leaves that had not left before: the loop reads no further batch
  and the deliverer's guard refuses every attempt not yet made (`check` raises `RunStopped`);
  requests in flight finish their attempt and are settled; those journaled but refused are
  taken out of the journal (`send_loop`), so the run that resumes sends them;
- `sleep` is the deliverer's backoff: it wakes at once when the stop is requested, so a request
  waiting to be retried stops waiting;
- `set` and `is_set` may be called from a signal handler: the main thread never waits on the
  event (only the send threads `sleep` on it).
"""

from __future__ import annotations

import threading

from engage_sync.errors import RunStopped


class StopRequest:
    """Set once, by whoever asks the run to stop. `grace`: None until a run watches the request
    (`arm`), then how long a stop may take before the asker ends the process
    (`adapters.stop_signal`)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None
        self.grace: float | None = None

    def arm(self, grace: float) -> None:
        """A run watches this request now, and stops within `grace` seconds of it."""
        self.grace = grace

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or less once the stop is requested."""
        self._event.wait(seconds)

    def check(self) -> None:
        """Raise RunStopped once the stop is requested."""
        if self._event.is_set():
            raise RunStopped(f"stopped by {self.reason}")
