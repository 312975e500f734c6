"""Fakes shared by the unit tests: a clock that never sleeps."""

from __future__ import annotations

import threading

EPOCH = 1_700_000_000.0
"""Wall time at monotonic 0."""


class FakeClock:
    """Monotonic and wall time that move only when someone sleeps or `advance`s. Sleeps are
    recorded in `slept`; thread-safe for the send pool's threads."""

    def __init__(self, start: float = 100.0) -> None:
        self.t = start
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self.t

    def time(self) -> float:
        return EPOCH + self.t

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(float(seconds))
            self.t += float(seconds)

    def window_end(self, window: float) -> float:
        """The end of the current fixed window of `window` seconds, as the sandbox's windows
        put it (and its `X-RateLimit-Reset`): the next multiple of `window` in epoch seconds."""
        return (self.time() // window + 1) * window

    def advance(self, seconds: float) -> None:
        self.t += seconds
