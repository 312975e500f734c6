"""The shared token bucket's store, as the budget sees it, and the rule for a store that fails.

A store call that fails with one of the store's connection errors is tried again, with pauses
growing from 0.1 s to 1 s, until the pauses would pass `deadline` (STORE_DEADLINE, 5 s): a
store restarting (Redis in well under a second, PostgreSQL in one or two) is waited for, the
run pausing with one warning line, through tenacity as every retry of engage-sync
(`deliver.retry_policy` owns the service's). A store still gone then stops the run with
RateBudgetUnavailable, which names the backend and the redacted URL, never a password. The
request waiting for the token was not sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from tenacity import RetryCallState, RetryError, Retrying, retry_if_exception_type, wait_exponential

from engage_sync.errors import RateBudgetUnavailable

T = TypeVar("T")

log = logging.getLogger(__name__)

STORE_DEADLINE = 5.0  # seconds of pauses a store call waits for its store to come back


class TokenStore(Protocol):
    """A token bucket per key, shared by every process that uses the same store."""

    backend: str
    url: str  # redacted

    def take(self, key: str, n: int, rate: float, capacity: float) -> tuple[int, float]:
        """Refill the bucket by elapsed time (at most `capacity`), then take up to `n` of its
        whole tokens. Returns (tokens granted: 1 to n, or 0; seconds until one is there).
        (Partial grants: waiting for a whole block let the bucket sit full, its refill lost.)"""
        ...

    def drain(self, key: str, rate: float, capacity: float, seconds: float) -> None:
        """Empty the bucket so that no token is granted for `seconds` (after a 429)."""
        ...


def guarded(store: TokenStore, errors: tuple[type[BaseException], ...], call: Callable[[], T],
            sleep: Callable[[float], None] = time.sleep, deadline: float = STORE_DEADLINE) -> T:
    """`call()`, tried again on `errors` while the pauses between tries (0.1 s doubling to
    1 s) add up to at most `deadline` seconds, with one warning line at the first; then
    RateBudgetUnavailable naming the backend and the redacted URL."""
    retrying = Retrying(stop=lambda rs: rs.idle_for + (rs.upcoming_sleep or 0) > deadline,
                        wait=wait_exponential(multiplier=0.1, max=1.0),
                        retry=retry_if_exception_type(errors), sleep=sleep,
                        before_sleep=lambda rs: _waiting(store, rs, deadline))
    try:
        return retrying(call)
    except RetryError as exc:
        error = exc.last_attempt.exception()
        raise RateBudgetUnavailable(
            f"the shared rate budget ({store.backend} at {store.url}) is unreachable "
            f"({type(error).__name__} for {deadline:g} s): the run stopped before sending "
            "more; nothing was lost, run it again to resume") from error


def _waiting(store: TokenStore, rs: RetryCallState, deadline: float) -> None:
    """The one line of an outage: said at its first failed try only."""
    if rs.attempt_number == 1:
        error = rs.outcome.exception() if rs.outcome is not None else None
        log.warning("the shared rate budget (%s at %s) did not answer (%s): sending pauses "
                    "for up to %g s while it comes back", store.backend, store.url,
                    type(error).__name__, deadline)
