"""The transport a run sends through: client CPU per request, httpx's own against the lean one.

Both send the same 75-object /users/track body through `Deliverer.send` to the lean sandbox on
127.0.0.1 (no rate limit: this measures cost, not throttling), in the same run, in alternating
chunks so both see the same background load, from 1 and from 4 sending threads. "CPU µs/req"
is this process's CPU time per request: what the thread that reads and packs shares a GIL with.

    .venv/bin/python benchmarks/transport_cpu.py [--runs 5] [--requests 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from deliver_overhead import make_request, timed
from pipeline_throughput import API_KEY, free_port, start_sandbox, stop

from engage_sync.deliver.deliverer import Deliverer
from engage_sync.deliver.lean_transport import LeanTransport
from engage_sync.deliver.ratelimit import RateBudgets

CHUNKS = 10


def deliverer(transport: httpx.BaseTransport, base_url: str) -> Deliverer:
    return Deliverer(transport, API_KEY, RateBudgets({"users_track": (10**9, 1.0)}),
                     base_url=base_url)


def measure(send: Callable[[], object], n: int, threads: int) -> tuple[float, float]:
    """(requests a second, CPU µs a request) of n sends from `threads` threads."""
    wall, cpu = timed(send, n, threads)
    return n / wall, cpu * 1e6 / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--requests", type=int, default=2000)
    args = p.parse_args()
    port = free_port()
    sandbox = start_sandbox(port, False, Path(tempfile.mkdtemp()) / "sandbox.log")
    base = f"http://127.0.0.1:{port}"
    request = make_request()
    try:
        for threads in (1, 4):
            with httpx.HTTPTransport(limits=httpx.Limits(max_connections=threads)) as own, \
                    LeanTransport(max_idle=threads) as lean:
                senders = {"httpx": deliverer(own, base), "lean": deliverer(lean, base)}
                results: dict[str, list[tuple[float, float]]] = {k: [] for k in senders}
                for _ in range(args.runs):
                    per: dict[str, list[tuple[float, float]]] = {k: [] for k in senders}
                    for _ in range(CHUNKS):
                        for name, d in senders.items():
                            def send(d: Deliverer = d) -> None:
                                assert d.send(request).outcome.kind == "ok"
                            per[name].append(measure(send, args.requests // CHUNKS, threads))
                    for name, chunks in per.items():
                        results[name].append((statistics.mean(r for r, _ in chunks),
                                              statistics.mean(c for _, c in chunks)))
                for name, runs in results.items():
                    print(f"{threads} thread(s), {name}: median of {args.runs}: "
                          f"{statistics.median(r for r, _ in runs):,.0f} req/s, "
                          f"{statistics.median(c for _, c in runs):.0f} CPU µs/req", flush=True)
    finally:
        stop(sandbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
