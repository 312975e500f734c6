"""What the service's headers say of its own windows, as a rate budget keeps it: where they
end (`WindowFollower`) and what is left of the current one (`ServiceCount`).

The service counts requests in fixed windows whose ends its answers give
(`X-RateLimit-Reset`). A budget that knows them can grant its limit in each, where a sliding
log alone waits a whole window after a burst while the service's may be about to end. Neither
class is thread-safe: the `RateBudget` that owns them calls them under its lock, and both read
time from its monotonic clock.

Invariants: an edge is followed only while it is safe to (`WindowFollower.following`): never
for windows shorter than four times `CLOCK_SKEW`, and never again once a 429 came (the edges
were not where the headers put them, or others share the workspace's windows) or an answer
took longer than the widest count margin allows. A service count never loosens: answers
arriving out of order cannot raise what is left of a window.
"""

from __future__ import annotations

from collections.abc import Callable

Clock = Callable[[], float]

MIN_WAIT = 1e-6  # so a float clock always moves forward past the instant it waits for
CLOCK_SKEW = 0.05
"""Seconds this machine's clock may be off the service's (the reset is read against it; NTP
keeps two hosts within milliseconds). A window is used only this long after its edge, and
windows shorter than four times this are never followed."""
EDGE_MARGIN = 0.5
"""The count margin at most: a grant this close before an edge counts in the next window too,
as the service may count it there. It is the clock skew plus the slowest answer seen (its time
from the grant bounds the time to be counted); until an answer was timed, this or a quarter
window. An answer slower than that allows ends the following of windows."""


class WindowFollower:
    """The service's windows as followed: an edge (on `clock`; None while none was seen, or
    for good once following stopped) and the count margin, `margin`."""

    def __init__(self, window: float, clock: Clock) -> None:
        self._clock = clock
        self.edge: float | None = None
        self.following = True
        self.slowest: float | None = None  # the slowest answer seen, from its grant
        self.margin = 0.0
        self.refit(window)

    def refit(self, window: float) -> None:
        """The count margin for `window` and the answers timed so far; a window too short, or
        an answer too slow, for the widest margin it allows ends the following."""
        widest = min(EDGE_MARGIN, window / 4)
        self.margin = widest if self.slowest is None else CLOCK_SKEW + self.slowest
        if window < 4 * CLOCK_SKEW or self.margin > widest:
            self.stop()

    def stop(self) -> None:
        """The sliding log alone, for good: no edge is followed again."""
        self.following, self.edge = False, None

    def timed(self, elapsed: float, window: float) -> None:
        """An answer came `elapsed` seconds after its grant."""
        self.slowest = max(self.slowest or 0.0, elapsed)
        self.refit(window)

    def saw_reset(self, seconds: float) -> None:
        """The service's current window ends `seconds` from now: an edge, while following."""
        if self.following:
            self.edge = self._clock() + seconds

    def full_for(self, first: float, now: float, window: float) -> float:
        """With an edge and the log full, its oldest grant at `first`: the seconds until one
        more may go (<= 0: now)."""
        assert self.edge is not None
        # the window in use: the last edge at least the skew ago, counted from `margin` before
        start = self.edge + (now - CLOCK_SKEW - self.edge) // window * window
        if first < start - self.margin:
            return 0.0
        # either rule keeps each of the service's windows within the limit, so whichever
        # frees a slot first: a burst across an edge is counted in both windows, where the log
        # (over a window and the margin, as requests may take more or less time) frees sooner
        return min(first + window + self.margin - now,
                   max(start + window + CLOCK_SKEW - now, MIN_WAIT))


class ServiceCount:
    """The service's own count of its current window: what `X-RateLimit-Remaining` said was
    left before `X-RateLimit-Reset`, less the grants made since."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.reset: float | None = None  # the window's reset, epoch seconds (None: no count)
        self.end = float("-inf")  # the same on `clock`
        self.left = 0

    def wait(self, now: float) -> float:
        """Seconds until the service's window allows a grant (0.0: now); a window that ended
        is forgotten."""
        if self.reset is None:
            return 0.0
        if now >= self.end:
            self.reset = None
            return 0.0
        return self.end - now if self.left <= 0 else 0.0

    def granted(self) -> None:
        if self.reset is not None:
            self.left -= 1

    def saw(self, reset: float, left: int, ends_in: float) -> None:
        """An answer said `left` remain in the window that resets at `reset` (epoch seconds),
        `ends_in` seconds from now; an older window's count is ignored."""
        if reset == self.reset:
            # Answers arrive out of order: an older, larger count must not loosen the cap.
            self.left = min(self.left, left)
        elif self.reset is None or reset > self.reset:
            self.reset, self.left = reset, left
            self.end = self._clock() + ends_in
