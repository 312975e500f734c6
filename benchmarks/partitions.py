"""Partitioned runs: rows/s of one attribute sync of N rows in 1, 2 and 4 partitions on a Dask
`LocalCluster`, with the sandbox enforcing the service's real /users/track limit (3,000
requests per 3 s: at most 75,000 rows/s) and with the limit off.

What it does:

1. builds (or reuses, with --keep-warehouse) a DuckDB file of N attribute rows in the
   service's sync format (`pipeline_throughput.build_warehouse`: 5 attributes per row);
2. starts the sandbox (lean mode, its own process) and `redis-server` on loopback: partitions
   on Dask workers must share one rate budget (`service.rate_budget.backend: redis`);
3. per partition count, starts one `LocalCluster` (`--workers` processes, enough threads each
   for every partition) and reuses it for the runs; partitions = 1 runs unpartitioned in this
   process (no cluster: what a run without `partitions` does);
4. per run: resets the sandbox, a fresh SQLite state database, then times
   `engage_sync.adapters.wiring.sync_file` (the coordinator) with the partitions submitted to the
   cluster as plain Dask tasks (`run_partition`: the Prefect task runner adds a few ms per
   task run, not measured here); `diff: off`, so every row is sent;
5. prints rows/s, requests and 429s at the sandbox, and the medians.

    .venv/bin/python benchmarks/partitions.py [--rows 300000] [--runs 3] [--parts 1,2,4]
        [--workers 2] [--limit on,off] [--keep-warehouse] [--workdir DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_throughput import (  # a sibling script, not a package
    API_KEY,
    TABLE,
    build_warehouse,
    free_port,
    start_sandbox,
    stop,
    warehouse_rows,
)


def start_redis(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is needed (apt-get install redis-server)")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            redis.Redis(port=port).ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    stop(proc)
    raise SystemExit("redis-server did not start")


def write_integration(folder: Path, warehouse: Path, base_url: str, parts: int,
                      workers: int) -> Path:
    path = folder / f"bench_users_{parts}.yaml"
    runner = (f"task_runner:\n  type: dask\n  n_workers: {workers}\n" if parts > 1 else "")
    path.write_text(
        "kind: attributes\n"
        f"warehouse:\n  url: duckdb:///{warehouse}\n"
        f"source:\n  table: {TABLE}\n"
        "payload:\n  identifier: external_id\n"
        f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\n"
        "  rate_budget:\n    backend: redis\n    url: ${BENCH_REDIS_URL}\n"
        f"settle_lag: 0s\ndiff: 'off'\npartitions: {parts}\n{runner}", "utf-8")
    return path


def dask_runner(client: Any) -> Callable[..., Any]:
    """`wiring.Runner`: each partition a Dask task on the cluster (no Prefect)."""
    from distributed import wait

    from engage_sync.adapters.wiring import run_partition

    def runner(_integration: Any, _budgets: Any) -> Any:
        def execute(jobs: list[Any], tick: Callable[[], None]) -> list[BaseException | None]:
            futures = [client.submit(run_partition, job, None, pure=False) for job in jobs]
            while True:
                with contextlib.suppress(TimeoutError):
                    wait(futures, timeout=2)
                tick()
                if all(f.done() for f in futures):
                    break
            return [f.exception() if f.status == "error" else None for f in futures]

        return execute

    return runner


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children reaped so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


def descendants(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if ppid == pid:
                kids.append(int(entry.name))
    return kids


def cpu_split(pids: dict[str, list[int]]) -> dict[str, float]:
    out = {}
    for name, group in pids.items():
        total = 0.0
        for pid in group:
            with contextlib.suppress(OSError):
                total += cpu_seconds(pid)
        out[name] = total
    return out


def one_run(path: Path, state: Path, runner: Any, sandbox: str,
            pids: dict[str, list[int]]) -> dict[str, Any]:
    from engage_sync.adapters.wiring import open_state, sync_file
    from engage_sync.config.run_options import RunOptions

    httpx.post(f"{sandbox}/_sandbox/reset", timeout=30).raise_for_status()
    state.unlink(missing_ok=True)
    store = open_state(f"sqlite:///{state}")
    before = cpu_split(pids)
    started = time.perf_counter()
    outcome = sync_file(path, store=store, options=RunOptions(), runner=runner)
    wall = time.perf_counter() - started
    after = cpu_split(pids)
    store.engine.dispose()
    counters = httpx.get(f"{sandbox}/_sandbox/counters", timeout=30).json()
    record = outcome.record or {}
    return {"wall": wall, "rows": record.get("rows_synced"), "status": record.get("job_status"),
            "counters": counters,
            "cpu": {k: round(after[k] - before[k], 2) for k in after}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parts", default="1,2,4")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", default="on,off")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep-warehouse", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-partitions-"))
    work.mkdir(parents=True, exist_ok=True)
    warehouse = work / "warehouse.duckdb"
    if not (args.keep_warehouse and warehouse_rows(warehouse) == args.rows):
        print(f"building {args.rows} rows: {build_warehouse(warehouse, args.rows):.1f} s",
              file=sys.stderr)
    redis_port = free_port()
    redis_proc = start_redis(redis_port, work)
    os.environ["BENCH_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    os.environ["ENGAGE_API_KEY"] = API_KEY
    results: list[dict[str, Any]] = []
    try:
        for limit in args.limit.split(","):
            port = free_port()
            sandbox = start_sandbox(port, limit == "on", work / "sandbox.log")
            base = f"http://127.0.0.1:{port}"
            pids = {"sandbox": [sandbox.pid], "redis": [redis_proc.pid]}
            try:
                for parts in map(int, args.parts.split(",")):
                    results.append(measure(args, work, warehouse, base, parts, limit, pids))
            finally:
                stop(sandbox)
    finally:
        stop(redis_proc)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def measure(args: argparse.Namespace, work: Path, warehouse: Path, base: str, parts: int,
            limit: str, pids: dict[str, list[int]]) -> dict[str, Any]:
    path = write_integration(work, warehouse, base, parts, args.workers)
    cluster = client = None
    runner = None
    if parts > 1:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=args.workers, processes=True, dashboard_address=None,
                               threads_per_worker=math.ceil(parts / args.workers))
        client = Client(cluster)
        runner = dask_runner(client)
    walls, cpus = [], []
    workers = [p for p in descendants(os.getpid()) if p not in pids["sandbox"] + pids["redis"]]
    ours = {**pids, "coordinator": [os.getpid()], "workers": workers}
    try:
        for n in range(args.runs):
            run = one_run(path, work / "state.db", runner, base, ours)
            assert run["rows"] == args.rows and run["status"] == "success", run
            walls.append(run["wall"])
            cpus.append(run["cpu"])
            print(f"limit {limit}, {parts} partition(s), run {n + 1}: {run['wall']:.2f} s, "
                  f"{args.rows / run['wall']:,.0f} rows/s, sandbox requests "
                  f"{run['counters'].get('requests')}, CPU s {run['cpu']}", file=sys.stderr)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    median = statistics.median(walls)
    line = {"limit": limit, "partitions": parts, "rows": args.rows, "runs": len(walls),
            "median_s": round(median, 2), "median_rows_per_s": round(args.rows / median),
            "rows_per_s": [round(args.rows / w) for w in walls],
            "cpu_s_median": {k: statistics.median(c[k] for c in cpus) for k in cpus[0]},
            "load_avg": os.getloadavg()[0]}
    print(json.dumps(line), flush=True)
    return line


if __name__ == "__main__":
    raise SystemExit(main())
