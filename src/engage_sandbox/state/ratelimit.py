"""Fixed-window rate limits per endpoint group.

Invariants: a window of group G with length W starts at a multiple of W (epoch seconds) and
ends at the next one; the reset figure is that end as an integer; the count never exceeds the
limit while limiting is on. The ``default`` group counts each path separately (the service's
default limit is per endpoint); every other group is shared by its paths.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from engage_sandbox.state.settings import SandboxSettings

PER_PATH_GROUPS = frozenset({"default"})


@dataclass(frozen=True)
class Verdict:
    """The outcome of one rate check, with the figures for the X-RateLimit-* headers."""

    allowed: bool
    limit: int
    remaining: int
    reset: int

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The three X-RateLimit-* headers."""
        return [
            (b"x-ratelimit-limit", str(self.limit).encode()),
            (b"x-ratelimit-remaining", str(self.remaining).encode()),
            (b"x-ratelimit-reset", str(self.reset).encode()),
        ]


class RateLimiter:
    """Counts requests per (group[, path]) in fixed windows."""

    def __init__(
        self, settings: SandboxSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._windows: dict[str, tuple[int, int]] = {}

    def reset(self) -> None:
        """Forget every window."""
        self._windows.clear()

    def check(self, group: str, path: str, *, consume: bool = True) -> Verdict:
        """Count one request (when ``consume``) and say whether it is within the limit."""
        rule = self._settings.rate_limit(group)
        key = f"{group} {path}" if group in PER_PATH_GROUPS else group
        now = self._clock()
        start = int(math.floor(now / rule.window_seconds) * rule.window_seconds)
        window_start, used = self._windows.get(key, (start, 0))
        if window_start != start:
            used = 0
        reset = start + rule.window_seconds
        if consume and (used < rule.limit or not self._settings.rate_limiting):
            used += 1
            self._windows[key] = (start, used)
            return Verdict(True, rule.limit, max(rule.limit - used, 0), reset)
        allowed = not consume and used < rule.limit
        return Verdict(allowed, rule.limit, max(rule.limit - used, 0), reset)
