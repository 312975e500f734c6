"""The shared token bucket's store, as the budget sees it, and the rule for a store that fails.

A store call that fails with one of the store's connection errors is tried STORE_ATTEMPTS
times (a blip), with a short growing pause, through tenacity as every retry of engage-sync
(`deliver.deliverer` owns the service's); then the run stops with RateBudgetUnavailable,
which names the backend and the redacted URL, never a password. The request waiting for the
token was not sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_incrementing,
)

from engage_sync.errors import RateBudgetUnavailable

T = TypeVar("T")

STORE_ATTEMPTS = 3  # a store call is tried this often (a blip) before the run stops


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
            sleep: Callable[[float], None] = time.sleep) -> T:
    """`call()`, tried STORE_ATTEMPTS times on `errors` (0.2 s, then 0.4 s between tries);
    then RateBudgetUnavailable naming the backend and the redacted URL."""
    retrying = Retrying(stop=stop_after_attempt(STORE_ATTEMPTS),
                        wait=wait_incrementing(start=0.2, increment=0.2),
                        retry=retry_if_exception_type(errors), sleep=sleep)
    try:
        return retrying(call)
    except RetryError as exc:
        error = exc.last_attempt.exception()
        raise RateBudgetUnavailable(
            f"the shared rate budget ({store.backend} at {store.url}) is unreachable "
            f"({type(error).__name__} after {STORE_ATTEMPTS} attempts): the run stopped before "
            "sending more; nothing was lost, run it again to resume") from error
