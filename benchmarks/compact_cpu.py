"""CPU and wall of a finished run's journal compaction (`Journal.compact_journal`), shaped as a
1,000,000-event run leaves it: 13,334 acknowledged requests of 75 items, each with its row
keys and key values kept; SQLite state in a temporary folder. The journal is built before the
clock; only the compaction is timed.

    .venv/bin/python benchmarks/compact_cpu.py [--requests 13334] [--runs 3] [--memory]

`--memory`: the peak of what Python allocated during the compaction (tracemalloc, which
slows it: CPU and wall are then not comparable).

Another revision's code, for a before/after: `git archive REV src | tar -x -C /tmp/rev`, then
`PYTHONPATH=/tmp/rev/src .venv/bin/python benchmarks/compact_cpu.py`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.store import StateStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ITEMS = 75
GROUP = 4  # requests journaled and settled together, as the exact journal groups them


def entry(n: int) -> JournalEntry:
    keys = tuple(f"EVENT_ID=ev-{n * ITEMS + j:09d}" for j in range(ITEMS))
    return JournalEntry(n, (T0 + timedelta(seconds=n), f"ev-{n * ITEMS:09d}"),
                        (T0 + timedelta(seconds=n + 1), f"ev-{(n + 1) * ITEMS:09d}"), ITEMS,
                        keys=keys, key_values=tuple(f'["{k[9:]}"]' for k in keys))


def one(requests: int, memory: bool = False) -> tuple[float, float, int, float]:
    """(CPU s, wall s, entries removed, peak MB allocated or 0) of compacting one built
    journal."""
    store = StateStore.from_url(f"sqlite:///{tempfile.mkdtemp()}/state.db")
    run = store.open_run("bench", "incremental", None, None)
    for first in range(1, requests + 1, GROUP):
        group = [entry(n) for n in range(first, min(first + GROUP, requests + 1))]
        store.journal_pending(run, group)
        store.settle(run, "bench", [Settlement(e.req_no, "acked", ITEMS) for e in group],
                     progress=group[-1].end)
    if memory:
        tracemalloc.start()
    cpu, wall = time.process_time(), time.perf_counter()
    removed = store.compact_journal(run)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = 0.0
    if memory:
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    store.engine.dispose()
    return cpu, wall, removed, peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=13_334)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--memory", action="store_true")
    args = p.parse_args()
    results = [one(args.requests, args.memory) for _ in range(args.runs)]
    cpus, walls = [r[0] for r in results], [r[1] for r in results]
    print(f"compaction of {args.requests} entries ({results[0][2]} removed): "
          f"median {statistics.median(cpus):.3f} s CPU, {statistics.median(walls):.3f} s wall "
          f"(CPU {', '.join(f'{c:.3f}' for c in cpus)})"
          + (f"; peak allocated {statistics.median(r[3] for r in results):.0f} MB"
             if args.memory else ""))


if __name__ == "__main__":
    main()
