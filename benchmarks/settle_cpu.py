"""CPU of one settle transaction on the run's thread, shaped as the events path makes them:
three requests of 75 items settled, three more journaled (their keys kept), the progress and
the cursor moved, the run fenced on its owner; SQLite state in a temporary folder.

    .venv/bin/python benchmarks/settle_cpu.py [--calls 3000]

Another revision's code, for a before/after: `git archive REV src | tar -x -C /tmp/rev`, then
`PYTHONPATH=/tmp/rev/src .venv/bin/python benchmarks/settle_cpu.py`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta

from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.store import StateStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = "bench-owner"


def entries(first: int, count: int) -> list[JournalEntry]:
    return [JournalEntry(n, (T0 + timedelta(seconds=n), "A"), (T0 + timedelta(seconds=n + 1), "B"),
                         75, keys=tuple(f"EVENT_ID={n * 75 + j}" for j in range(75)))
            for n in range(first, first + count)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000)
    calls = p.parse_args().calls
    store = StateStore.from_url(f"sqlite:///{tempfile.mkdtemp()}/state.db")
    run = store.open_run("bench", "incremental", None, None, owner=OWNER, lease_seconds=600)
    groups = [entries(1 + 3 * i, 3) for i in range(calls + 1)]  # built before the clock
    settles = [[Settlement(e.req_no, "acked", 75) for e in group] for group in groups]
    progress = [(T0 + timedelta(seconds=i), f"EVENT_ID={i}") for i in range(calls)]
    store.journal_pending(run, groups[0], owner=OWNER)
    cpu, wall = time.thread_time(), time.perf_counter()
    for i in range(calls):
        store.settle(run, "bench", settles[i], progress=progress[i], owner=OWNER,
                     pending=groups[i + 1])
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    print(f"settle: {1e6 * cpu / calls:.0f} us of CPU, {1e6 * wall / calls:.0f} us wall a call "
          f"({calls} calls)")


if __name__ == "__main__":
    main()
