"""Rate budgets: how many requests may leave now, per endpoint group and service.

A `RateBudget` grants at most `limit` requests in any span of `per_seconds` (a sliding log of
the last `limit` grant times; a token bucket would allow up to twice the limit within one of a
fixed-window service's windows, which it answers with 429). Once the service's answers say
where its windows end (`X-RateLimit-Reset`), it also grants `limit` in each of those windows,
as the service counts them (`deliver/service_windows.py`). It tightens itself from the
service's `X-RateLimit-*` headers (`deliver/rate_headers.py`); after a 429 the deliverer
pauses it (`pause_until`: everyone sharing it waits for the reset or Retry-After), and from
then on it keeps to the sliding log, as after an answer too slow for its margin.

Times: `clock` is monotonic (intervals), `wall` is epoch seconds (the service's reset times);
both and `sleep` are injectable so tests never sleep.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

from engage_sync.deliver.rate_headers import LIMIT, REMAINING, header, number, parse_reset
from engage_sync.deliver.service_windows import MIN_WAIT, ServiceCount, WindowFollower
from engage_sync.pack.request import IDENTITY, SUBSCRIPTION, SYNC_STATUS, USERS_TRACK

Clock = Callable[[], float]
Sleep = Callable[[float], None]

#: Defaults from service-facts.md as (requests, per_seconds); accounts differ, so configurable.
DEFAULT_RATES: Mapping[str, tuple[int, float]] = {
    USERS_TRACK: (3000, 3.0),
    SUBSCRIPTION: (5000, 60.0),
    IDENTITY: (20000, 60.0),
    SYNC_STATUS: (100, 60.0),
}


class RateBudget:
    """At most `limit` grants in any `per_seconds` span, or, once the service gave a window's
    end, in each of its windows; thread-safe.

    Invariants: until a reset was observed, and for good after a 429 (`pause_until`: the edges
    were not where the headers put them, or others share the workspace's windows) or an answer
    slower than the count margin allows, no span of `per_seconds` holds more than `limit`
    grants (the sliding log). While following the service's windows (edges at the last reset
    seen plus whole `per_seconds`), a grant is made when fewer than `limit` grants were made
    in the `per_seconds` plus the count margin before it, or since the count margin before the
    last edge at least `CLOCK_SKEW` ago. Either way each of the service's windows holds at
    most `limit` when its edges come at most `CLOCK_SKEW` after ours, and the service counts
    each request after its grant within the count margin less the service's lead on our edge.
    The margin comes from answers already timed, so a request slower than all before it can
    still be counted in the next window: the 429 that may follow ends the following. Also
    honours the service's own count of its current window (`observe`). Its rate only ever
    goes down from the configured figure.
    """

    def __init__(
        self,
        requests: int,
        per_seconds: float,
        *,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        sleep: Sleep = time.sleep,
        max_pause: float = 300.0,
    ) -> None:
        if requests < 1 or per_seconds <= 0:
            raise ValueError("a rate budget needs requests >= 1 and per_seconds > 0")
        self._limit = requests
        self._window = float(per_seconds)
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._max_pause = max_pause
        self._lock = threading.Lock()
        self._grants: deque[float] = deque(maxlen=requests)
        self._paused_until = float("-inf")
        self._count = ServiceCount(clock)  # the service's count of its current window
        self._windows = WindowFollower(self._window, clock)  # its edges, while followed
        self._resting = 0  # requests sleeping for a grant (`holding`)

    def __repr__(self) -> str:
        return f"RateBudget({self._limit} per {self._window:g} s)"

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def per_seconds(self) -> float:
        return self._window

    @property
    def service_edge(self) -> float | None:
        """An edge of the service's windows as followed, in epoch seconds (None: none seen, or
        keeping to the sliding log)."""
        with self._lock:
            edge = self._windows.edge
            return None if edge is None else edge - self._clock() + self._wall()

    @property
    def count_margin(self) -> float:
        """Seconds before an edge whose grants the next window counts too (`EDGE_MARGIN`)."""
        with self._lock:
            return self._windows.margin

    def try_acquire(self) -> float:
        """Take a slot if one is free now and return 0.0; else return the seconds to wait."""
        with self._lock:
            now = self._clock()
            wait = max(self._paused_until - now, self._count.wait(now))
            if len(self._grants) == self._limit:
                wait = max(wait, self._full_for(now))
            if wait > 0:
                return max(wait, MIN_WAIT)
            self._grants.append(now)
            self._count.granted()
            return 0.0

    def _full_for(self, now: float) -> float:
        """With `limit` grants in the log: the seconds until one more may go (<= 0: now)."""
        first = self._grants[0]
        if self._windows.edge is None:
            return first + self._window - now
        return self._windows.full_for(first, now, self._window)

    def acquire(self) -> float:
        """Block until a slot is free and take it; returns the seconds spent waiting."""
        waited = 0.0
        while (wait := self.try_acquire()) > 0:
            self._rest(wait)
            waited += wait
        return waited

    def _rest(self, seconds: float) -> None:
        """Sleep `seconds` for a grant, counted in `holding` meanwhile."""
        with self._lock:
            self._resting += 1
        try:
            self._sleep(seconds)
        finally:
            with self._lock:
                self._resting -= 1

    @property
    def holding(self) -> bool:
        """A request waits for a grant now: the limit, not its sender, sets the pace."""
        return self._resting > 0

    def pause_until(self, reset_epoch: float) -> None:
        """Grant nothing before `reset_epoch` (epoch seconds), e.g. after a 429."""
        with self._lock:
            now = self._clock()
            delay = min(reset_epoch - self._wall(), self._max_pause)
            self._paused_until = max(self._paused_until, now + delay)
            self._windows.stop()

    def tighten(self, requests: int, per_seconds: float) -> None:
        """Adopt `requests` per `per_seconds` if that rate is lower than the current one."""
        if requests < 1 or per_seconds <= 0:
            raise ValueError("a rate budget needs requests >= 1 and per_seconds > 0")
        with self._lock:
            if requests / per_seconds < self._limit / self._window:
                self._limit, self._window = requests, float(per_seconds)
                self._grants = deque(self._grants, maxlen=requests)
                self._windows.refit(self._window)

    def observe(self, headers: Mapping[str, str], elapsed: float | None = None) -> None:
        """Adapt to a response's `X-RateLimit-Limit/Remaining/Reset` (case-insensitive), and
        to its time from the request's grant (`elapsed` seconds, when measured).

        A lower limit than ours is adopted; `Remaining` before `Reset` caps further grants in
        the service's current window. Malformed or missing headers are ignored.
        """
        limit = number(header(headers, LIMIT))
        remaining = number(header(headers, REMAINING))
        wall_now = self._wall()
        reset = parse_reset(headers, wall_now)
        with self._lock:
            if limit is not None and limit >= 1:
                self._set_limit(int(limit))
            if elapsed is not None and elapsed >= 0:
                self._windows.timed(elapsed, self._window)
            if reset is not None and reset > wall_now:
                self._windows.saw_reset(reset - wall_now)
            if remaining is None or reset is None or reset <= wall_now:
                return
            self._count.saw(reset, int(remaining), min(reset - wall_now, self._max_pause))

    def _set_limit(self, requests: int) -> None:
        if requests < self._limit:
            self._limit = requests
            self._grants = deque(self._grants, maxlen=requests)


class RateBudgets:
    """The shared budgets of one run: one `RateBudget` per (service base URL, endpoint group).

    Integrations of one run that hit the same group of the same service get the same instance.
    """

    def __init__(
        self,
        rates: Mapping[str, tuple[int, float]] = DEFAULT_RATES,
        *,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        sleep: Sleep = time.sleep,
    ) -> None:
        self._rates = dict(rates)
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._lock = threading.Lock()
        self._budgets: dict[tuple[str, str], RateBudget] = {}

    def budget(
        self, base_url: str, group: str, *, requests: int | None = None,
        per_seconds: float | None = None,
    ) -> RateBudget:
        """The shared budget of `group` at `base_url`, created at the group's default rate.

        An explicit rate (from an integration's config) tightens the shared budget; it never
        loosens a budget another integration made stricter. Raises KeyError for an unknown
        group without an explicit rate.
        """
        key = (base_url.rstrip("/").lower(), group)
        with self._lock:
            found = self._budgets.get(key)
            if found is None:
                default = self._rates.get(group)
                if default is None and (requests is None or per_seconds is None):
                    raise KeyError(f"no default rate for the endpoint group {group!r}")
                limit, window = default if default is not None else (0, 0.0)
                found = self._new_budget(key, requests or limit, per_seconds or window)
                self._budgets[key] = found
        if requests is not None or per_seconds is not None:
            found.tighten(requests or found.limit, per_seconds or found.per_seconds)
        return found

    def _new_budget(self, key: tuple[str, str], requests: int, per_seconds: float
                    ) -> RateBudget:
        """The budget of `key` (base URL, group): private to this process here; a subclass
        shares it with other processes (see `rate_budget_shared`)."""
        return RateBudget(requests, per_seconds, clock=self._clock, wall=self._wall,
                          sleep=self._sleep)
