"""The field record's size and lookup cost: N users × A attributes on SQLite and PostgreSQL.

Fills the record through `StateStore.settle` (the path a run takes: one transaction per
2,400 acknowledged objects, appended to the record's log), then folds the log into
`engage_fields` (what a run does at its end), then reports bytes per user and
per (user, attribute) as the database counts them (SQLite: pages in use; PostgreSQL:
`pg_total_relation_size`, table + index + TOAST), and the median time of one batch lookup of
10,000 users (what a run pays per extracted batch).

    .venv/bin/python benchmarks/field_record_size.py --users 1000000 --attributes 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the server helpers

from engage_sync.diff.field_diff import diff
from engage_sync.state.field_codec import encode, user_key
from engage_sync.state.fields import FRESH
from engage_sync.state.store import StateStore

SETTLE = 2400  # objects per settle transaction: 32 requests of 75


def fill(store: StateStore, users: int, attributes: int) -> float:
    """Record every user's attributes; returns seconds taken."""
    names = [f"attribute_{a:02d}" for a in range(attributes)]
    start = time.perf_counter()
    for first in range(0, users, SETTLE):
        deltas = []
        for u in range(first, min(first + SETTLE, users)):
            obj = {"external_id": f"user-{u:08d}", **{n: f"{n}-{u % 97}" for n in names}}
            deltas.append((f"external_id:user-{u:08d}",
                           FRESH + encode(diff(obj, "external_id", None).delta)))
        store.settle("bench", "bench", [], acked_fields=deltas)
    logged = time.perf_counter()
    store.fold_fields("bench")
    end = time.perf_counter()
    print(f"  settled (logged) in {logged - start:.1f} s, folded in {end - logged:.1f} s")
    return end - start


def size_bytes(store: StateStore) -> int:
    with store.engine.connect() as conn:
        if store.engine.dialect.name == "postgresql":
            return int(conn.scalar(sa.text("SELECT pg_total_relation_size('engage_fields')")))
        pages = conn.scalar(sa.text(
            "SELECT SUM(pgsize - unused) FROM dbstat WHERE name LIKE '%engage_fields%'"))
        return int(pages or 0)


def lookup_ms(store: StateStore, users: int, runs: int = 5) -> float:
    times = []
    for r in range(runs):
        step = max(users // 10_000, 1)
        keys = [user_key(f"external_id:user-{u:08d}") for u in range(r, users, step)][:10_000]
        start = time.perf_counter()
        found = store.field_digests("bench", keys)
        times.append((time.perf_counter() - start) * 1000)
        assert len(found) == len(keys)
    return statistics.median(times)


def measure(name: str, store: StateStore, users: int, attributes: int) -> None:
    seconds = fill(store, users, attributes)
    size = size_bytes(store)
    print(f"{name}: {users:,} users × {attributes} attributes recorded in {seconds:.1f} s "
          f"({users / seconds:,.0f} users/s); {size / 1e6:,.1f} MB = {size / users:.1f} B/user "
          f"= {size / users / attributes:.1f} B per (user, attribute); lookup of 10,000 users "
          f"{lookup_ms(store, users):.0f} ms (median of 5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--attributes", type=int, default=20)
    parser.add_argument("--postgres-url")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if not args.skip_sqlite:
            measure("SQLite", StateStore.from_url(f"sqlite:///{folder / 'state.db'}"),
                    args.users, args.attributes)
        if args.skip_postgres:
            return
        url = args.postgres_url
        if url is None:
            from tests.pg_server import postgres_server
            url = stack.enter_context(postgres_server())
        measure("PostgreSQL", StateStore.from_url(url), args.users, args.attributes)


if __name__ == "__main__":
    main()
