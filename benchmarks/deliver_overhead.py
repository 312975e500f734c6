"""Delivery overhead: requests per second of `Deliverer.send` against raw `client.post`.

Both send the same 75-object /users/track body over the same keep-alive connection pool (an
`httpx.Client` over a transport, and the `Deliverer` straight on that transport), in the same
run, alternating, so the difference is what the delivery layer adds (rate budget, classify,
tenacity, logging checks) less what it saves by skipping the client layer. Two servers:

- ``mock``: an `httpx.MockTransport` answering 201 in-process (the overhead, magnified);
- ``loopback``: a trivial Starlette app under uvicorn in a separate process on 127.0.0.1
  (what a real run sees), sequential and with 4 sending threads.

The rate budget is set far above the service's 3,000 per 3 s so it never makes anyone wait:
this measures cost, not throttling.

    .venv/bin/python benchmarks/deliver_overhead.py [--runs 5] [--requests 2000]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import orjson

from engage_sync.deliver.deliverer import Deliverer
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.items import Item
from engage_sync.pack.request import Request

KEY = "bench-key-0123456789"
RESPONSE = b'{"message":"success","attributes_processed":75}'
# Real figures would throttle the run (that is their job); these are parsed all the same.
HEADERS = {"X-RateLimit-Limit": "1000000000", "X-RateLimit-Remaining": "999999999",
           "X-RateLimit-Reset": "4102444800"}


def make_request() -> Request:
    objects = [{"external_id": f"user-{i:06d}", "plan": "gold", "score": i, "opted_in": True,
                "city": "Lisbon", "tags": ["a", "b"]} for i in range(75)]
    blobs = [orjson.dumps(o) for o in objects]
    body = b'{"attributes":[' + b",".join(blobs) + b"]}"
    items = tuple(Item(i, f"row{i}", f"user-{i:06d}", "attributes", b) for i, b in
                  enumerate(blobs))
    return Request("/users/track", "users_track", body, items,
                   tuple(("attributes", i) for i in range(75)))


def mock_handler(request: httpx.Request) -> httpx.Response:
    return httpx.Response(201, content=RESPONSE, headers=HEADERS)


def serve(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request as StarletteRequest
    from starlette.responses import Response
    from starlette.routing import Route

    async def track(request: StarletteRequest) -> Response:
        await request.body()
        return Response(RESPONSE, status_code=201, headers=HEADERS,
                        media_type="application/json")

    app = Starlette(routes=[Route("/users/track", track, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(fn: Callable[[], object], n: int, threads: int) -> tuple[float, float]:
    """(wall seconds, client CPU seconds) taken by n calls of fn from `threads` threads."""
    start, cpu = time.perf_counter(), time.process_time()
    if threads == 1:
        for _ in range(n):
            fn()
    else:
        with ThreadPoolExecutor(threads) as pool:
            for f in [pool.submit(fn) for _ in range(n)]:
                f.result()
    return time.perf_counter() - start, time.process_time() - cpu


@dataclass
class Figures:
    raw_rps: float
    deliver_rps: float
    raw_cpu_us: float
    deliver_cpu_us: float


def measure(client: httpx.Client, transport: httpx.BaseTransport, n: int, runs: int,
            threads: int) -> Figures:
    """Medians over `runs` runs of requests/s and client CPU µs per request, both ways.

    Each run sends n requests each way in 10 alternating chunks, so both see the same load
    from anything else running on the machine.
    """
    request = make_request()
    budgets = RateBudgets({"users_track": (10**9, 1.0)})
    deliverer = Deliverer(transport, KEY, budgets, base_url=str(client.base_url))
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def raw() -> object:
        response = client.post("/users/track", content=request.body, headers=headers)
        assert response.status_code == 201
        return response

    def deliver() -> object:
        result = deliverer.send(request)
        assert result.outcome.kind == "ok"
        return result

    timed(raw, n // 10, threads)  # warm up: connections, caches
    timed(deliver, n // 10, threads)
    chunk = max(1, n // 10)
    sent = 10 * chunk
    rows: list[tuple[float, float, float, float]] = []
    for _ in range(runs):
        totals = {raw: [0.0, 0.0], deliver: [0.0, 0.0]}
        for i in range(10):
            for fn in (raw, deliver) if i % 2 == 0 else (deliver, raw):
                wall, cpu = timed(fn, chunk, threads)
                totals[fn][0] += wall
                totals[fn][1] += cpu
        rows.append((sent / totals[raw][0], sent / totals[deliver][0],
                     totals[raw][1] / sent * 1e6, totals[deliver][1] / sent * 1e6))
    return Figures(*(statistics.median(column) for column in zip(*rows, strict=True)))


def report(label: str, f: Figures) -> None:
    print(f"| {label} | {f.raw_rps:,.0f} | {f.deliver_rps:,.0f} | "
          f"{f.deliver_rps / f.raw_rps:.1%} | {f.raw_cpu_us:.0f} | {f.deliver_cpu_us:.0f} | "
          f"{f.deliver_cpu_us - f.raw_cpu_us:+.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return

    n, runs = args.requests, args.runs
    print(f"{runs} runs of {n} requests each (75 objects, {len(make_request().body):,} bytes); "
          f"medians in requests/s; load average before: {os.getloadavg()[0]:.1f}")
    print("| server, threads | raw req/s | send req/s | ratio | raw CPU µs/req "
          "| send CPU µs/req | overhead CPU µs/req |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    mock = httpx.MockTransport(mock_handler)
    with httpx.Client(transport=mock, base_url="http://mock") as client:
        report("MockTransport, 1", measure(client, mock, n, runs, 1))

    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(base + "/")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
        pool = httpx.HTTPTransport(limits=limits)
        with httpx.Client(base_url=base, transport=pool, timeout=30) as client:
            report("uvicorn loopback, 1", measure(client, pool, n, runs, 1))
            report("uvicorn loopback, 4", measure(client, pool, n, runs, 4))
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
