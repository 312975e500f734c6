"""Cost of one rate-budget acquire: the private budget, and the shared one on PostgreSQL and
on Redis, per block taken (one store round trip) and per request (a block shared by its
requests).

The budgets' limits are set far above anything reachable, so nobody waits: this measures
cost, not throttling. Each figure is the median of `--runs` runs. Without `--postgres-url` /
`--redis-url`, throwaway servers are started on 127.0.0.1 (Debian's PostgreSQL binaries and
`redis-server`, as the tests do).

    .venv/bin/python benchmarks/rate_budget_acquire.py [--runs 5] [--acquires 5000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the server helpers

from engage_sync.deliver.budget_store import TokenStore
from engage_sync.deliver.ratelimit import RateBudget
from engage_sync.deliver.shared_budget import SharedRateBudget
from engage_sync.deliver.store_postgres import PostgresTokenStore
from engage_sync.deliver.store_redis import RedisTokenStore

HUGE = 10**12  # requests per second: never a wait


def micros(action: Callable[[], object], count: int, runs: int) -> float:
    """Median over `runs` of the µs one call of `action` takes, over `count` calls."""
    medians = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(count):
            action()
        medians.append((time.perf_counter() - started) / count * 1e6)
    return statistics.median(medians)


def shared(store: TokenStore, block: int) -> SharedRateBudget:
    return SharedRateBudget(store, f"bench|{uuid.uuid4()}", HUGE, 1.0, block=block)


def measure(store: TokenStore, acquires: int, runs: int) -> dict[str, float]:
    key = f"bench|{uuid.uuid4()}"
    take = micros(lambda: store.take(key, 1, float(HUGE), float(HUGE)), acquires // 10, runs)
    per_request = {block: micros(shared(store, block).acquire, acquires, runs)
                   for block in (1, 10, 50)}
    return {"take (one block)": take, **{f"acquire, blocks of {b}": us
                                         for b, us in per_request.items()}}


@contextmanager
def servers(pg_url: str | None, redis_url: str | None) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        if pg_url is None:
            from tests.pg_server import postgres_server

            pg_url = stack.enter_context(postgres_server())
        if redis_url is None:
            from tests.redis_server import redis_server

            redis_url = stack.enter_context(redis_server()).url
        yield pg_url, redis_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--acquires", type=int, default=5000)
    parser.add_argument("--postgres-url")
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    local = RateBudget(HUGE, 1.0)
    print(f"local: acquire {micros(local.acquire, args.acquires, args.runs):.1f} µs")
    with servers(args.postgres_url, args.redis_url) as (pg_url, redis_url):
        stores = (PostgresTokenStore(pg_url, "postgres"), RedisTokenStore(redis_url, "redis"))
        for store in stores:
            figures = measure(store, args.acquires, args.runs)
            store.close()
            for what, us in figures.items():
                print(f"{store.backend}: {what} {us:.1f} µs")


if __name__ == "__main__":
    main()
