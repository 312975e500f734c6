"""A running run's counts shown on its row as it goes, at most every few seconds.

Invariants: the first call writes (a run's record shows counts from its first settle on),
later ones only once `every` seconds passed since the last write, so a run's state database
sees one more small transaction every few seconds, not one per request; a failed write is
logged and never stops the run (its settles keep what counts; the run's end writes the
final counts over these).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

EVERY = 2.0
"""Seconds between two writes of a running run's counts."""


class CountsShown:
    """Calls `write` (the run's counts onto its row) when `tick`ed, throttled to once every
    `every` seconds of `clock`."""

    def __init__(self, write: Callable[[], None], every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.every, self.clock = write, every, clock
        self.last: float | None = None

    def tick(self) -> None:
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return
        self.last = now
        try:
            self.write()
        except Exception as exc:  # the counts so far are a view: never the run's failure
            log.warning("the run's counts so far were not written: %s", exc)
