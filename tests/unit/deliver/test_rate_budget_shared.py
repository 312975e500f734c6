"""SharedRateBudget on a fake clock over an in-memory bucket that follows the same arithmetic as
the PostgreSQL and Redis stores (tests/integration/deliver/test_shared_budget_stores.py checks
those).
Nothing here really sleeps."""

from __future__ import annotations

import math
import random
from pathlib import Path

import httpx
import pytest
import yaml

from engage_sync.adapters.budgets import budgets_for
from engage_sync.config.files import load_integration
from engage_sync.config.integration import Integration
from engage_sync.config.service import BudgetStore, budget_store
from engage_sync.deliver.budget_store import STORE_DEADLINE, guarded
from engage_sync.deliver.deliverer import Deliverer
from engage_sync.deliver.ratelimit import RateBudget, RateBudgets
from engage_sync.deliver.shared_budget import SharedRateBudget, SharedRateBudgets, plan
from engage_sync.errors import ConfigError, RateBudgetUnavailable
from tests.unit.deliver.test_deliver import make_request
from tests.unit.deliver.test_ratelimit import FakeClock, grants, max_in_window


class MemoryStore:
    """The shared token bucket of the stores, on the fake clock (the store's clock)."""

    backend = "memory"
    url = "memory://"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, stamp)
        self.takes = 0

    def _avail(self, key: str, rate: float, capacity: float) -> float:
        now = self.clock.monotonic()
        tokens, stamp = self.buckets.get(key, (capacity, now))
        return min(capacity, tokens + rate * max(0.0, now - stamp))

    def take(self, key: str, n: int, rate: float, capacity: float) -> tuple[int, float]:
        self.takes += 1
        avail = self._avail(key, rate, capacity)
        granted = min(n, math.floor(avail)) if avail >= 1 else 0
        self.buckets[key] = (avail - granted, self.clock.monotonic())
        return granted, 0.0 if granted else (1 - avail) / rate

    def drain(self, key: str, rate: float, capacity: float, seconds: float) -> None:
        avail = self._avail(key, rate, capacity)
        self.buckets[key] = (min(avail, -rate * seconds), self.clock.monotonic())


def shared(store: MemoryStore, clock: FakeClock, limit: int, per_seconds: float,
           block: int | None = None) -> SharedRateBudget:
    return SharedRateBudget(store, "svc|users_track", limit, per_seconds, block=block,
                            clock=clock.monotonic, wall=clock.time, sleep=clock.sleep)


def test_the_plan_leaves_room_for_a_full_bucket_and_a_block_still_in_use() -> None:
    # limit = block + rate * (window + lifetime)
    for limit, window in ((3000, 3.0), (30, 1.0), (100, 60.0)):
        p = plan(limit, window)
        assert p.block + p.rate * (window + p.lifetime) == pytest.approx(limit)
    assert plan(3000, 3.0) == plan(3000, 3.0, 50)
    assert (plan(3000, 3.0).block, plan(3000, 3.0).lifetime) == (50, pytest.approx(0.06))
    assert plan(3000, 3.0).rate > 0.96 * 1000  # within 4 % of the service's limit
    assert plan(30, 1.0).block == 3
    assert plan(10, 1.0, block=100).block == 9  # a block larger than the limit allows shrinks
    assert plan(1, 1.0).block == 1 and plan(1, 1.0).rate > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_participants_together_never_exceed_the_limit_in_any_window(seed: int) -> None:
    """Three processes' budgets on one bucket, acquiring in a random order with random idle
    time (so some blocks expire unused): no span of one window holds more than the limit,
    and the bucket's rate is used well while anyone is asking: at least 70 % here, where one
    participant's wait lets the others' blocks expire (concurrent processes would use them)."""
    clock, rng = FakeClock(), random.Random(seed)
    store = MemoryStore(clock)
    limit, window = 30, 1.0
    budgets = [shared(store, clock, limit, window) for _ in range(3)]
    times: list[float] = []
    idle = 0.0
    while clock.monotonic() < 160.0:
        b = rng.choice(budgets)
        if rng.random() < 0.05:
            idle += (pause := rng.random() * 0.3)
            clock.advance(pause)
        b.acquire()
        times.append(clock.monotonic())
    assert max_in_window(times, window) <= limit
    assert len(times) >= 0.7 * plan(limit, window).rate * (60 - idle)


def test_a_block_is_one_store_hit_and_its_unused_tokens_expire() -> None:
    clock = FakeClock()
    store = MemoryStore(clock)
    b = shared(store, clock, 3000, 3.0)  # blocks of up to 50; the bucket starts with one
    for _ in range(50):
        b.acquire()
    assert store.takes == 1  # 50 grants, one store hit
    clock.advance(10.0)
    b.acquire()
    b.acquire()
    assert store.takes == 2
    clock.advance(plan(3000, 3.0).lifetime + 0.01)
    b.acquire()
    assert store.takes == 3  # the 48 tokens left had expired: never hoarded
    # and, having used 2 of its last block, the budget asked for 2, not 50
    assert store.buckets["svc|users_track"][0] == pytest.approx(48, abs=0.1)


def test_a_take_gets_what_the_bucket_holds_rather_than_waiting_for_a_whole_block() -> None:
    """Waiting for a whole block let the bucket sit full while it refilled, and a full bucket
    loses its refill: the budget takes the tokens that are there and goes on; on an empty
    bucket it waits for a quarter block, so that a budget at its pace is not a store call per
    request."""
    clock = FakeClock()
    store = MemoryStore(clock)
    b = shared(store, clock, 3000, 3.0)
    b._size = 50
    store.buckets["svc|users_track"] = (3.4, clock.monotonic())  # 3 whole tokens there
    start = clock.monotonic()
    for _ in range(3):
        b.acquire()
    assert clock.monotonic() == start  # no wait for the 47 missing
    assert store.takes == 1 and store.buckets["svc|users_track"][0] == pytest.approx(0.4)
    b.acquire()  # the bucket is empty: wait for a quarter block (12 tokens), not a whole one
    rate = plan(3000, 3.0).rate
    assert clock.monotonic() - start == pytest.approx(11.6 / rate)
    assert store.takes == 3  # one take that got nothing, one after the wait


def test_at_its_pace_a_budget_uses_the_bucket_fully_in_few_store_calls() -> None:
    """Two processes asking faster than the bucket refills: together they get its rate, and
    each store call grants a few requests' worth (with a take per token, two calls went to
    every request: 60,925 calls for 30,000 requests)."""
    clock = FakeClock()
    store = MemoryStore(clock)
    budgets = [shared(store, clock, 3000, 3.0) for _ in range(2)]
    start = clock.monotonic()
    for k in range(30_000):
        budgets[k % 2].acquire()
    rate = 30_000 / (clock.monotonic() - start)
    assert rate >= 0.95 * plan(3000, 3.0).rate
    assert store.takes <= 30_000 / 4


def test_a_429_seen_by_one_participant_pauses_every_other() -> None:
    clock = FakeClock()
    store = MemoryStore(clock)
    first, second = shared(store, clock, 30, 1.0), shared(store, clock, 30, 1.0)
    first.acquire()
    second.acquire()
    second._left = 0  # its block spent, so its next grant needs the bucket
    first.pause_until(clock.time() + 5.0)  # e.g. X-RateLimit-Reset of a 429
    start = clock.monotonic()
    second.acquire()
    assert clock.monotonic() - start >= 5.0


def test_the_local_budget_still_applies_inside_the_shared_one() -> None:
    """The service's headers lower one participant's limit: its own pace follows at once."""
    clock = FakeClock()
    b = shared(MemoryStore(clock), clock, 3000, 3.0)
    b.observe({"X-RateLimit-Limit": "6"})
    times = grants(b, clock, 12)
    assert max_in_window(times, 3.0) <= 6


class Broken:
    backend = "redis"
    url = "redis://:***@127.0.0.1:1/0"

    def __init__(self) -> None:
        self.calls = 0
        self.paused: list[float] = []

    def take(self, key: str, n: int, rate: float, capacity: float) -> tuple[int, float]:
        def call() -> tuple[int, float]:
            self.calls += 1
            raise ConnectionRefusedError("connection refused")

        return guarded(self, (OSError,), call, sleep=self.paused.append)

    def drain(self, key: str, rate: float, capacity: float, seconds: float) -> None:
        raise AssertionError("not used")


def test_a_lost_store_is_a_clear_error_never_a_private_budget() -> None:
    clock = FakeClock()
    store = Broken()
    b = SharedRateBudget(store, "k", 30, 1.0, clock=clock.monotonic, wall=clock.time,
                         sleep=clock.sleep)
    with pytest.raises(RateBudgetUnavailable) as caught:
        b.acquire()
    message = str(caught.value)
    assert "redis at redis://:***@127.0.0.1:1/0" in message
    assert "run it again to resume" in message and "nothing was lost" in message
    # a restart is waited for (pauses of 0.1 s doubling to 1 s), a lost store not for ever
    assert store.paused == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0] and store.calls == 8
    assert sum(store.paused) <= STORE_DEADLINE
    with pytest.raises(RateBudgetUnavailable):
        b.acquire()  # and it stays an error: no fall back to the private budget


def test_shared_budgets_hand_out_shared_budgets_and_tighten_them() -> None:
    clock = FakeClock()
    budgets = SharedRateBudgets(MemoryStore(clock), clock=clock.monotonic, wall=clock.time,
                                sleep=clock.sleep)
    b = budgets.budget("http://SVC/", "users_track", requests=30, per_seconds=1.0)
    assert isinstance(b, SharedRateBudget) and b.limit == 30
    assert budgets.budget("http://svc", "users_track") is b


def write(tmp_path: Path, rate_budget: object) -> Path:
    path = tmp_path / "users.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "attributes", "source": {"table": "USERS"},
        "service": {"rate_budget": rate_budget}}))
    return path


def resolved(integration: Integration) -> BudgetStore | None:
    return budget_store(integration.service.rate_budget, integration.name)


def test_local_is_the_default_and_keeps_the_given_budgets(tmp_path: Path) -> None:
    integration = load_integration(write(tmp_path, {"backend": "local"}))
    given = RateBudgets()
    assert budgets_for(resolved(integration), given) is given
    assert type(budgets_for(resolved(integration))) is RateBudgets


@pytest.mark.parametrize("section, words", [
    ({"backend": "redis"}, ["service.rate_budget", "needs a 'url'"]),
    ({"backend": "local", "url": "redis://h"}, ["service.rate_budget", "takes no 'url'"]),
    ({"backend": "etcd", "url": "x"}, ["service.rate_budget.backend"]),
    ({"backend": "redis", "url": "redis://h", "block": 0}, ["service.rate_budget.block"]),
    ({"backend": "redis", "url": "postgresql://u:hunter2@h/db"},
     ["service.rate_budget", "not a redis URL", "postgresql://u:***@h/db"]),
])
def test_a_bad_rate_budget_section_names_the_file_and_key(
        tmp_path: Path, section: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_integration(write(tmp_path, section))
    assert "users.yaml" in str(caught.value) and "hunter2" not in str(caught.value)
    for word in words:
        assert word in str(caught.value)


def test_the_url_is_expanded_checked_and_redacted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    integration = load_integration(write(tmp_path, {"backend": "postgres",
                                                    "url": "${BUDGET_URL}"}))
    monkeypatch.delenv("BUDGET_URL", raising=False)
    with pytest.raises(ConfigError, match="BUDGET_URL is not set"):
        budgets_for(resolved(integration))
    monkeypatch.setenv("BUDGET_URL", "redis://:hunter2@127.0.0.1:6379/0")
    with pytest.raises(ConfigError) as caught:
        budgets_for(resolved(integration))
    assert "service.rate_budget.url" in str(caught.value)
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)
    monkeypatch.setenv("BUDGET_URL", "postgresql://sync:hunter2@127.0.0.1:1/db")
    budgets = budgets_for(resolved(integration))
    assert isinstance(budgets, SharedRateBudgets)
    assert "hunter2" not in repr(budgets) and "hunter2" not in repr(budgets.store)
    # one flow run's integrations share
    assert budgets_for(resolved(integration), budgets) is budgets


def test_the_private_budget_is_unchanged_for_local() -> None:
    budgets = RateBudgets()
    assert type(budgets.budget("http://svc", "users_track")) is RateBudget


class FailsAfter(MemoryStore):
    """Grants `good` takes, then is lost."""

    backend = "postgres"
    url = "postgresql+psycopg://sync:***@db/budget"

    def __init__(self, clock: FakeClock, good: int) -> None:
        super().__init__(clock)
        self.good = good
        self.refused = 0

    def take(self, key: str, n: int, rate: float, capacity: float) -> tuple[int, float]:
        if self.takes >= self.good:
            self.refused += 1
            return guarded(self, (OSError,), _refuse, sleep=lambda s: None)
        return super().take(key, n, rate, capacity)


def _refuse() -> tuple[int, float]:
    raise ConnectionResetError("server closed the connection")


def deliverer_on(store: MemoryStore, clock: FakeClock,
                 *answers: httpx.Response | Exception) -> tuple[Deliverer, list[int]]:
    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        answer = answers[min(len(sent), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    budgets = SharedRateBudgets(store, block=1, clock=clock.monotonic, wall=clock.time,
                                sleep=clock.sleep)
    return Deliverer(httpx.MockTransport(handler), "sk-test-key", budgets,
                     base_url="https://svc.test", sleep=clock.sleep, clock=clock.monotonic,
                     wall=clock.time), sent


def test_a_request_waiting_for_a_lost_budget_is_never_sent_and_the_error_says_so() -> None:
    clock = FakeClock()
    store = FailsAfter(clock, good=0)
    d, sent = deliverer_on(store, clock, httpx.Response(201, json={}))
    with pytest.raises(RateBudgetUnavailable, match="postgres at postgresql"):
        d.send(make_request())
    with pytest.raises(RateBudgetUnavailable, match="postgres at postgresql"):
        d.send(make_request())  # requests queued behind it fail at once, without a retry
    assert sent == [] and store.refused == 1


def test_a_lost_budget_after_an_attempt_in_doubt_leaves_the_request_in_doubt() -> None:
    """The first attempt may have been processed: the request cannot be left for the next run
    to send again as if it never left (events would be doubled without a count)."""
    clock = FakeClock()
    d, sent = deliverer_on(FailsAfter(clock, good=1), clock, httpx.ReadTimeout("slow"))
    result = d.send(make_request(resend_in_doubt=True))
    assert (result.outcome.kind, result.attempts, result.doubtful_attempts) == ("in_doubt", 1, 1)
    assert "an earlier attempt may have been processed" in result.outcome.reason
    assert len(sent) == 1
