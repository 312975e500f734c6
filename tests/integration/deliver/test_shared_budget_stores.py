"""The shared token bucket on a real PostgreSQL and a real Redis (servers on loopback): the
same arithmetic as the fake-clock unit tests, atomic under concurrent takers, in real time."""

from __future__ import annotations

import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
import redis as redis_py
import sqlalchemy as sa

from engage_sync.deliver.store_postgres import TABLE, PostgresTokenStore
from engage_sync.deliver.store_redis import RedisTokenStore
from engage_sync.errors import RateBudgetUnavailable
from tests.pg_server import free_port
from tests.redis_server import RedisServer

Store = PostgresTokenStore | RedisTokenStore
T = TypeVar("T")
PROGRESS_DEADLINE = 120.0  # seconds the takers may need for their tokens on a busy machine


@pytest.fixture(params=["postgres", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    server: RedisServer = request.getfixturevalue("redis")
    return server.url


def open_store(url: str, deadline: float = 5.0) -> Store:
    return (PostgresTokenStore(url, deadline) if url.startswith("postgresql")
            else RedisTokenStore(url, deadline))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.close()


def key() -> str:
    return f"http://svc.test|users_track|{uuid.uuid4()}"


def timed(call: Callable[[], T]) -> tuple[T, float, float]:
    """`call()` with the monotonic times just before and just after it: the store ran it (on
    its own clock, the same machine's) somewhere in between, however busy the machine."""
    before = time.monotonic()
    result = call()
    return result, before, time.monotonic()


def test_a_full_bucket_gives_a_block_then_what_it_has_then_says_how_long_to_wait(
        store: Store) -> None:
    """The bucket's arithmetic in real time: each bound below is the refill over an interval
    measured around the store calls (wider when the machine is busy, never wrong)."""
    k = key()
    first, t0, _ = timed(lambda: store.take(k, 50, 10.0, 50))
    assert first == (50, 0.0)  # a new bucket starts with one block
    (granted, wait), t1, t2 = timed(lambda: store.take(k, 50, 10.0, 50))
    assert granted <= 10.0 * (t2 - t0)  # only what came back since: 10 a second
    if not granted:  # one token at 10 a second, less the time spent since the block
        assert 0.1 - (t2 - t0) - 1e-6 <= wait <= 0.1 + 1e-6
    time.sleep(0.35)
    (granted, _), t3, t4 = timed(lambda: store.take(k, 50, 10.0, 50))
    # part of a block: at least what 10 a second gave between the two calls, at most that
    # over the span of both calls plus the fraction of a token the second one left
    assert 3 <= min(50, int(10.0 * (t3 - t2))) <= granted <= min(50, 1 + 10.0 * (t4 - t1))
    time.sleep(0.6)  # refilled, but never above the capacity
    (full, _), t5, _ = timed(lambda: store.take(k, 5, 10.0, 5))
    assert full == 5
    (granted, _), _, t6 = timed(lambda: store.take(k, 1, 10.0, 5))
    assert granted == 0 or t6 - t5 >= 0.1  # emptied: nothing before a token came back


def test_a_drain_pauses_every_taker_for_the_time_given(store: Store) -> None:
    k = key()
    store.take(k, 1, 10.0, 5)
    _, before, _ = timed(lambda: store.drain(k, 10.0, 5, 1.5))
    (granted, wait), _, after = timed(lambda: store.take(k, 1, 10.0, 5))
    # drained for 1.5 s, then one token at 10 a second: no taker goes before 1.6 s after the
    # drain, of which the time between the two calls has passed
    assert granted == 0 or after - before >= 1.6
    if not granted:
        assert 1.6 - (after - before) - 1e-6 <= wait <= 1.6 + 1e-6


def test_concurrent_takers_of_two_clients_never_get_more_than_the_bucket_gives(
        store_url: str) -> None:
    """Six takers on two clients: together never more than the bucket's block plus its rate
    over the time they took (the property), and they do get tokens (progress: at least 70 %
    of the rate over `seconds` of it, however long a busy machine makes that take)."""
    k, rate, seconds = key(), 40.0, 1.5
    wanted = 0.7 * rate * seconds
    stores = [open_store(store_url) for _ in range(2)]
    granted: list[int] = []
    lock = threading.Lock()
    started = time.monotonic()
    least, deadline = started + seconds, started + PROGRESS_DEADLINE

    def taker(s: Store) -> None:
        # takes for `seconds` at least, then until the takers together got `wanted`
        while (now := time.monotonic()) < least or (sum(granted) < wanted and now < deadline):
            got, wait = s.take(k, 2, rate, 2)
            with lock:
                granted.append(got)
            time.sleep(min(wait, 0.01))

    threads = [threading.Thread(target=taker, args=(s,)) for s in stores for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    for s in stores:
        s.close()
    assert sum(granted) <= 2 + rate * elapsed
    assert sum(granted) >= wanted, f"{sum(granted)} tokens in {elapsed:.1f} s"


def test_redis_reloads_its_script_after_the_server_forgot_it(redis: RedisServer) -> None:
    """redis-py's Script runs EVALSHA and loads the script again on NOSCRIPT: the pin on
    `redis` guards this."""
    store = RedisTokenStore(redis.url)
    k = key()
    assert store.take(k, 1, 10.0, 5)[0] == 1
    redis_py.Redis.from_url(redis.url).script_flush()
    assert store.take(k, 1, 10.0, 5)[0] == 1
    store.close()


def test_postgres_keeps_one_row_per_bucket(postgres_url: str) -> None:
    store = PostgresTokenStore(postgres_url)
    k = key()
    for _ in range(3):
        store.take(k, 1, 10.0, 5)
    engine = sa.create_engine(postgres_url)
    with engine.connect() as conn:
        rows = conn.scalar(sa.text(f"SELECT count(*) FROM {TABLE} WHERE bucket = :k"), {"k": k})
    engine.dispose()
    store.close()
    assert rows == 1


@pytest.mark.parametrize("url", ["postgresql://sync:hunter2@127.0.0.1:{port}/budget",
                                 "redis://:hunter2@127.0.0.1:{port}/0"])
def test_an_unreachable_store_is_named_without_its_password(url: str) -> None:
    url = url.format(port=free_port())  # nothing listens there
    store = open_store(url, deadline=0.3)  # not waited for long here
    with pytest.raises(RateBudgetUnavailable) as caught:
        store.take(key(), 1, 10.0, 5)
    chain = "".join(traceback.format_exception(caught.value))
    assert "hunter2" not in chain
    assert f"{store.backend} at " in str(caught.value) and ":***@127.0.0.1:" in str(caught.value)
    assert "run it again to resume" in str(caught.value)
