"""What following the service's windows gives a run, over every phase of its first request.

A model, not a measurement: the project's `RateBudget` on a fake clock, fed by a pipeline that
can make a request every 1/`--rate` seconds, the service's windows of `--window` seconds on
whole multiples (as the sandbox's), its first answer taking `--answer` seconds (the count
margin comes from it). For `--phases` first requests spread evenly over a window, it reports
the span from the first grant to the last under the sliding log alone and with the windows
followed: the time the service's limit sets for the run's requests. Runs measured by
`user_command.py` sample a few phases only, so their medians move with the phase; this gives
the expectation. Defaults: a 1M-row run (13,334 requests), the pipeline's 2,400 requests a
second and the slowest answer measured on loopback (17 ms).

    .venv/bin/python benchmarks/window_phase.py [--requests 13334] [--rate 2400] [--phases 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engage_sync.deliver.ratelimit import RateBudget
from tests.fakes import EPOCH, FakeClock


def span(phase: float, follow: bool, requests: int, rate: float, answer: float,
         limit: int, window: float) -> float:
    """Seconds from the first grant to the last, the first request `phase` seconds into a
    service window."""
    start = (-EPOCH) % window + phase  # the fake clock's epoch reading is then on the grid
    clock = FakeClock(start=start)
    budget = RateBudget(limit, window, clock=clock.monotonic, wall=clock.time,
                        sleep=clock.sleep)
    first = None
    for i in range(requests):
        budget.acquire()
        now = clock.monotonic()
        if first is None:
            first = now
        if follow and i == 0:  # the first answer gives the window's end
            budget.observe({"X-RateLimit-Reset": repr(clock.window_end(window))}, answer)
        clock.advance(1 / rate)
    assert first is not None
    return clock.monotonic() - first - 1 / rate


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=13_334)
    p.add_argument("--rate", type=float, default=2400.0,
                   help="requests a second the pipeline makes")
    p.add_argument("--answer", type=float, default=0.017, help="the slowest answer, seconds")
    p.add_argument("--limit", type=int, default=3000)
    p.add_argument("--window", type=float, default=3.0)
    p.add_argument("--phases", type=int, default=60)
    args = p.parse_args()
    phases = [k * args.window / args.phases for k in range(args.phases)]
    for follow in (False, True):
        spans = [span(ph, follow, args.requests, args.rate, args.answer, args.limit,
                      args.window) for ph in phases]
        print(f"{'windows followed' if follow else 'sliding log'}: first to last grant "
              f"mean {statistics.mean(spans):.2f} s, median {statistics.median(spans):.2f}, "
              f"{min(spans):.2f}-{max(spans):.2f} over {len(spans)} phases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
