"""One rate budget for every process of a workspace: a token bucket in a shared store.

A `SharedRateBudget` is a `RateBudget` (it still paces this process, adapts to the service's
`X-RateLimit-*` headers and pauses after a 429) that also takes a token from a bucket every
process shares (`TokenStore`: PostgreSQL or Redis) before each grant. Tokens are taken in
blocks, so the store is hit once per block, not once per request.

Invariant (why the bucket's rate is below the service's limit): the bucket holds at most one
block (`capacity`), so the store grants at most `block + rate * L` tokens in any span of L
seconds; a block is only used for `lifetime` seconds after it was asked for (unused tokens
expire: nobody hoards). Tokens used in a window of W seconds were therefore taken in a span of
W + lifetime seconds, so at most `block + rate * (W + lifetime)` requests leave in any window;
`plan` picks the rate that makes this the service's limit. A process takes blocks sized to
what it used of its last one (doubling while it uses them up), so a slow process asks for
small blocks instead of letting large ones expire. (A limit of 1 request a window cannot keep
this exactly; the local budget of each process still applies.)

The rate and capacity come with each take, from the taker's own budget (the group's figure,
`service.rate_limit`, or lower from the service's headers): give every integration of a
workspace the same `rate_limit`, or the bucket refills at whichever figure took last.

Losing the store raises `RateBudgetUnavailable` (never a silent fall back to a private budget)
once `budget_store.guarded` gave up waiting for it, and at once to every request of this
budget after that (one wait per outage, not one per request queued); the request waiting for
the token was not sent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TypeVar

from engage_sync.deliver.budget_store import TokenStore
from engage_sync.deliver.ratelimit import DEFAULT_RATES, Clock, RateBudget, RateBudgets, Sleep
from engage_sync.errors import RateBudgetUnavailable

T = TypeVar("T")

MAX_BLOCK = 50  # requests' worth of tokens per take at most: one store hit per 50 requests
LIFETIME_SHARE = 0.02  # a block is usable for this share of the window (60 ms of 3 s): far
# longer than a take on a store nearby, short because the refill rate pays for it: tokens a
# block leaves unused when it expires are lost, and a longer lifetime lost enough of them to
# fall under the ceiling's 90 % target once a run's start is counted (benchmarks/README.md,
# `partitions.py`). The lifetime counts from before the take, so a store
# tens of ms away wastes tokens: keep it in the workers' network (README)


@dataclass(frozen=True)
class BlockPlan:
    """How a budget of `limit` requests per `per_seconds` is taken from a shared bucket."""

    block: int  # tokens per take at most, also the bucket's capacity
    rate: float  # tokens per second the bucket refills
    lifetime: float  # seconds a taken block stays usable


def plan(limit: int, per_seconds: float, block: int | None = None) -> BlockPlan:
    """The block, refill rate and block lifetime that keep every participant together within
    `limit` per `per_seconds` (see the module's invariant). `block` defaults to a tenth of the
    limit, at most MAX_BLOCK, and is lowered below the limit."""
    wanted = block if block is not None else min(MAX_BLOCK, limit // 10)
    size = max(1, min(wanted, limit - 1))
    lifetime = per_seconds * LIFETIME_SHARE
    return BlockPlan(size, max(limit - size, 1) / (per_seconds + lifetime), lifetime)


class SharedRateBudget(RateBudget):
    """A `RateBudget` whose every grant also takes a token of the shared bucket `key`."""

    def __init__(self, store: TokenStore, key: str, requests: int, per_seconds: float, *,
                 block: int | None = None, clock: Clock = time.monotonic,
                 wall: Clock = time.time, sleep: Sleep = time.sleep) -> None:
        super().__init__(requests, per_seconds, clock=clock, wall=wall, sleep=sleep)
        self._store, self._key, self._block = store, key, block
        self._take_lock = threading.Lock()
        self._left = 0  # tokens of the current block not used yet
        self._got = 0  # tokens the current block was granted
        self._size = max(1, self.plan.block // 2)  # tokens the next take asks for
        self._expires = float("-inf")  # when they stop being usable (on `clock`)
        self._lost: RateBudgetUnavailable | None = None  # the store given up on, if it was

    def __repr__(self) -> str:
        return f"SharedRateBudget({self.limit} per {self.per_seconds:g} s, {self._store.backend})"

    @property
    def plan(self) -> BlockPlan:
        return plan(self.limit, self.per_seconds, self._block)

    def acquire(self) -> float:
        """This process's slot first (pacing, headers, 429 pause), then a shared token, used
        at once so it cannot outlive its block. Raises RateBudgetUnavailable."""
        return super().acquire() + self._take_token()

    def _take_token(self) -> float:
        with self._take_lock:
            if self._lost is not None:  # given up on by a request before: not waited for again
                raise self._lost
            if self._left > 0 and self._clock() < self._expires:
                self._left -= 1
                return 0.0
            block = self.plan
            # the last block used up in time: ask for twice as many; expired: for what was used
            self._size = (min(self._size * 2, block.block) if self._left <= 0
                          else max(1, min(self._got - self._left, block.block)))
            self._left, waited = 0, 0.0
            # an empty bucket: wait until a quarter block is there, not one token, or a budget
            # that is the run's wall would cost a store call per request
            want = min(self._size, max(1, block.block // 4))
            while True:
                asked = self._clock()  # the block's life counts from before it was granted
                try:
                    granted, wait = self._store.take(self._key, self._size, block.rate,
                                                     block.block)
                except RateBudgetUnavailable as exc:
                    self._lost = exc
                    raise
                if granted:
                    self._got, self._left = granted, granted - 1
                    self._expires = asked + block.lifetime
                    return waited
                wait = max(wait + (want - 1) / block.rate, 1e-3)
                self._rest(wait)
                waited += wait

    def pause_until(self, reset_epoch: float) -> None:
        """Pause this process and drain the shared bucket, so every participant waits."""
        super().pause_until(reset_epoch)
        seconds = min(reset_epoch - self._wall(), self._max_pause)
        if seconds > 0:
            self._left = 0
            block = self.plan
            self._store.drain(self._key, block.rate, block.block, seconds)


class SharedRateBudgets(RateBudgets):
    """`RateBudgets` whose budgets are `SharedRateBudget`s of one store, keyed by
    (service base URL, endpoint group) like the private ones."""

    def __init__(self, store: TokenStore, *, block: int | None = None,
                 clock: Clock = time.monotonic, wall: Clock = time.time,
                 sleep: Sleep = time.sleep) -> None:
        super().__init__(DEFAULT_RATES, clock=clock, wall=wall, sleep=sleep)
        self.store = store
        self._block = block

    def __repr__(self) -> str:
        return f"SharedRateBudgets({self.store.backend} at {self.store.url})"

    def _new_budget(self, key: tuple[str, str], requests: int, per_seconds: float
                    ) -> RateBudget:
        return SharedRateBudget(self.store, "|".join(key), requests, per_seconds,
                                block=self._block, clock=self._clock, wall=self._wall,
                                sleep=self._sleep)
