"""Pipeline throughput and memory: a whole sync of N attribute rows, DuckDB → lean sandbox.

What it does, per invocation:

1. builds (or reuses, with --keep-warehouse) a DuckDB file with N rows in the service's own
   warehouse-sync format: ``UPDATED_AT`` (TIMESTAMP, 4 rows per millisecond), ``EXTERNAL_ID``
   (one user per row) and ``PAYLOAD`` (DuckDB JSON, 5 attributes, ~90 bytes), all in DuckDB SQL;
2. starts the sandbox in lean mode as a separate process on 127.0.0.1 with the service's
   real rate limit for /users/track (3,000 requests per 3 s) unless --no-rate-limits;
3. per run: resets the sandbox (counters and rate windows), then runs
   ``engage_sync.adapters.wiring.sync_file`` in a separate child process with a fresh SQLite
   state DB,
   so the peak RSS is the sync's own. Peak RSS comes from ``os.wait4`` (that child's
   ``ru_maxrss``); the parent also samples ``/proc/PID/status`` every 50 ms to show the RSS
   over the run (at 25 / 50 / 75 % of the run and at its end);
4. reports rows, wall seconds of ``sync_file`` (and of the whole child process), rows/s, peak
   RSS, requests received by the sandbox (its /_sandbox/counters, 429s included) against the
   minimum ceil(N / 75), and the run's status record; then the medians over the runs.

    .venv/bin/python benchmarks/pipeline_throughput.py [--rows 1000000] [--runs 3]
        [--keep-warehouse] [--workdir DIR] [--no-rate-limits] [--profile FILE.prof] [--json]
        [--duckdb-config 'memory_limit=100MB&threads=1'] [--src DIR]

Targets (`benchmarks/README.md`): >= 50,000 rows/s end to end, peak RSS < 400 MB at any row count,
requests within 1 % of ceil(N / 75). With the real rate limit the ceiling is
1,000 requests/s x 75 = 75,000 rows/s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "config" / "sandbox-seed.yaml"
API_KEY = "sandbox-demo-key"  # SANDBOX ONLY: the public demo key of the sandbox seed
TABLE = "USERS_SYNC"
OBJECTS_PER_REQUEST = 75
PAGE = os.sysconf("SC_PAGE_SIZE")


# --- warehouse -------------------------------------------------------------------------------

def build_warehouse(path: Path, rows: int) -> float:
    """N rows of UPDATED_AT, EXTERNAL_ID, PAYLOAD (JSON, 5 attributes), built in DuckDB SQL.
    Returns the seconds taken."""
    import duckdb

    started = time.perf_counter()
    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    try:
        con.execute(f"""
            CREATE TABLE {TABLE} AS
            SELECT TIMESTAMP '2024-01-01 00:00:00' + to_microseconds((i // 4) * 1000)
                       AS UPDATED_AT,
                   'user-' || lpad(i::VARCHAR, 9, '0') AS EXTERNAL_ID,
                   json_object('first_name', 'Name' || i,
                               'plan', CASE i % 3 WHEN 0 THEN 'gold' WHEN 1 THEN 'silver'
                                                   ELSE 'free' END,
                               'score', i % 1000,
                               'vip', i % 10 = 0,
                               'ltv', round((i % 100000) * 0.25, 2)) AS PAYLOAD
            FROM range(?) t(i)
        """, [rows])
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return time.perf_counter() - started


def warehouse_rows(path: Path) -> int | None:
    import duckdb

    if not path.exists():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
        try:
            return int(con.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])  # type: ignore[index]
        finally:
            con.close()
    except duckdb.Error:
        return None


def write_integration(folder: Path, warehouse: Path, base_url: str, duckdb_config: str) -> Path:
    path = folder / "bench_users.yaml"
    query = f"?{duckdb_config}" if duckdb_config else ""  # duckdb_engine: URL query → config
    path.write_text(
        "kind: attributes\n"
        f"warehouse:\n  url: duckdb:///{warehouse}{query}\n"
        f"source:\n  table: {TABLE}\n"
        "payload:\n  identifier: external_id\n"
        f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\n"
        "settle_lag: 0s\n",
        "utf-8",
    )
    return path


# --- sandbox ---------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sandbox(port: int, rate_limits: bool, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "engage_sandbox.cli", "--port", str(port), "--lean",
           "--seed", str(SEED)]
    if not rate_limits:
        cmd.append("--no-rate-limits")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/_sandbox/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    stop(proc)
    raise SystemExit(f"sandbox did not start: {' '.join(cmd)}\n{log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# --- one run (child side) --------------------------------------------------------------------

class ChildrenRss:
    """Samples the peak resident set (VmHWM) of this process's children, keeping the largest."""

    def __init__(self) -> None:
        self._peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ChildrenRss:
        self._thread.start()
        return self

    def peak_kb(self) -> int:
        self._stop.set()
        self._thread.join()
        return self._peak

    def _run(self) -> None:
        me, known, scanned = str(os.getpid()), set(), 0.0
        while not self._stop.wait(0.1):
            if time.monotonic() - scanned > 1:  # look for new children once a second
                scanned = time.monotonic()
                for stat in Path("/proc").glob("[0-9]*/stat"):
                    try:
                        if stat.read_text().rsplit(")", 1)[1].split()[1] == me:
                            known.add(stat.parent / "status")
                    except (OSError, IndexError):
                        continue
            for status in list(known):
                try:
                    rss = next(int(line.split()[1]) for line in status.read_text().splitlines()
                               if line.startswith("VmHWM:"))
                except (OSError, StopIteration):
                    known.discard(status)
                    continue
                self._peak = max(self._peak, rss)


def child_main(integration: str, state_db: str, profile: str | None) -> int:
    """Runs in the child process: one sync, then one JSON line on stdout."""
    import importlib

    import engage_sync

    wiring = None  # `--src` may name a snapshot from before the stage folders, or older
    for name in ("engage_sync.adapters.wiring", "engage_sync.wiring", "engage_sync.runner"):
        try:
            wiring = importlib.import_module(name)
            break
        except ModuleNotFoundError:
            continue
    assert wiring is not None, "no wiring module in the package under test"
    open_state, sync_file = wiring.open_state, wiring.sync_file

    store = open_state(f"sqlite:///{state_db}")
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    watcher = ChildrenRss().start()
    started = time.perf_counter()
    cpu0 = time.process_time()
    if profiler is not None:
        profiler.enable()
    outcome = sync_file(integration, store=store)
    if profiler is not None and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    print(json.dumps({
        "wall": wall, "cpu": cpu, "record": outcome.record,
        "package": str(Path(engage_sync.__file__).parent),
        "maxrss_self_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        # processes the sync started (a first diffed run's field helper): their own peak
        # RSS, sampled (RUSAGE_CHILDREN's would be this process's, taken at the fork), and CPU
        "maxrss_children_kb": watcher.peak_kb(),
        "cpu_children": sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2]),
    }, default=str), flush=True)
    return 0


# --- one run (parent side) -------------------------------------------------------------------

class RssSampler(threading.Thread):
    """Samples VmRSS of a pid every `every` seconds until stopped."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MB)
        self.done = threading.Event()

    def run(self) -> None:
        t0 = time.monotonic()
        path = f"/proc/{self.pid}/statm"
        while not self.done.is_set():
            try:
                with open(path) as f:
                    resident = int(f.read().split()[1]) * PAGE / 2**20
                if resident == 0:  # exited, not yet reaped
                    break
            except (OSError, ValueError, IndexError):
                break
            self.samples.append((time.monotonic() - t0, resident))
            self.done.wait(self.every)

    def at(self, share: float) -> float | None:
        """RSS (MB) at a share of the sampled span."""
        if not self.samples:
            return None
        end = self.samples[-1][0]
        return next((mb for t, mb in self.samples if t >= share * end), self.samples[-1][1])


def one_run(args: argparse.Namespace, integration: Path, workdir: Path, base_url: str,
            k: int) -> dict[str, Any]:
    httpx.post(f"{base_url}/_sandbox/reset", timeout=10).raise_for_status()
    state_db = workdir / f"state-{k}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state_db}{suffix}").unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(integration),
           str(state_db)]
    if args.profile and k == 0:
        cmd.append(args.profile)
    env = {**os.environ, "ENGAGE_API_KEY": API_KEY}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    sampler = RssSampler(proc.pid)
    sampler.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    # wait4 gives this child's own rusage (ru_maxrss in KiB on Linux)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    process_wall = time.perf_counter() - started
    sampler.done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"sync child failed with {proc.returncode}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    counters = httpx.get(f"{base_url}/_sandbox/counters", timeout=10).json()
    received = int(counters["requests"].get("/users/track", 0))
    minimum = math.ceil(args.rows / OBJECTS_PER_REQUEST)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state_db}{suffix}").unlink(missing_ok=True)
    return {
        "rows": args.rows,
        "wall_s": result["wall"],
        "process_wall_s": process_wall,
        "cpu_s": result["cpu"],
        "rows_per_s": args.rows / result["wall"],
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "rss_mb_at_25_50_75_100": [round(sampler.at(s) or 0, 1) for s in (0.25, 0.5, 0.75, 1)],
        "requests": received,
        "requests_min": minimum,
        "requests_over_min_pct": 100 * (received - minimum) / minimum,
        "attributes_processed": counters["attributes_processed"],
        "record": result["record"],
        "package": result["package"],
        "loadavg_1min_after": os.getloadavg()[0],
    }


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        return child_main(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keep-warehouse", action="store_true",
                   help="keep the DuckDB file (and reuse one with the same row count)")
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-bench"))
    p.add_argument("--no-rate-limits", action="store_true",
                   help="sandbox never answers 429 (the client still keeps its own budget)")
    p.add_argument("--profile", help="cProfile the first run's sync into this .prof file")
    p.add_argument("--json", action="store_true", help="print the results as JSON too")
    p.add_argument("--duckdb-config", default="",
                   help="DuckDB settings appended to the warehouse URL as its query string, "
                   "e.g. 'memory_limit=100MB&threads=1' (duckdb_engine passes them to connect)")
    p.add_argument("--src", help="run the sync and the sandbox from this source folder (e.g. a "
                   "`git archive HEAD src` snapshot) instead of the installed package")
    args = p.parse_args()

    if args.src:
        # children inherit it; ahead of the editable install's path entry
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(Path(args.src).resolve()), *filter(None, [os.environ.get("PYTHONPATH")])])
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    warehouse = workdir / f"warehouse-{args.rows}.duckdb"
    if args.keep_warehouse and warehouse_rows(warehouse) == args.rows:
        print(f"warehouse: reusing {warehouse}")
    else:
        took = build_warehouse(warehouse, args.rows)
        print(f"warehouse: {args.rows:,} rows built in {took:.1f} s "
              f"({warehouse.stat().st_size / 2**20:.0f} MB) at {warehouse}")

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    integration = write_integration(workdir, warehouse, base_url, args.duckdb_config)
    limits = "off (--no-rate-limits)" if args.no_rate_limits else "on, 3000 per 3 s"
    print(f"sandbox: lean, 127.0.0.1:{port}, rate limiting {limits}; "
          f"{os.cpu_count()} CPUs; {args.runs} run(s) of {args.rows:,} rows; "
          f"DuckDB config: {args.duckdb_config or 'defaults'}")
    sandbox = start_sandbox(port, not args.no_rate_limits, workdir / "sandbox.log")
    results = []
    try:
        for k in range(args.runs):
            r = one_run(args, integration, workdir, base_url, k)
            results.append(r)
            rec = r["record"]
            print(f"run {k + 1}: {r['wall_s']:.1f} s ({r['process_wall_s']:.1f} s with start-up), "
                  f"{r['rows_per_s']:,.0f} rows/s, cpu {r['cpu_s']:.1f} s, "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB (RSS at 25/50/75/100 %: "
                  f"{r['rss_mb_at_25_50_75_100']}), requests {r['requests']:,} "
                  f"(min {r['requests_min']:,}, +{r['requests_over_min_pct']:.2f} %), "
                  f"status {rec['job_status']} synced {rec['rows_synced']:,} "
                  f"failed {rec['rows_failed_with_errors']:,} in doubt {rec['rows_in_doubt']}; "
                  f"load average {r['loadavg_1min_after']:.1f} (other work shares the machine)",
                  flush=True)
    finally:
        stop(sandbox)
        if not args.keep_warehouse:
            warehouse.unlink(missing_ok=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)

    print(f"\nengage_sync from {results[0]['package']}")
    print(f"median of {len(results)}: rows {args.rows:,}, wall {med('wall_s'):.1f} s, "
          f"{med('rows_per_s'):,.0f} rows/s, peak RSS {med('peak_rss_mb'):.0f} MB "
          f"(max {max(r['peak_rss_mb'] for r in results):.0f} MB), "
          f"requests {med('requests'):,.0f} vs minimum {results[0]['requests_min']:,} "
          f"(+{med('requests_over_min_pct'):.2f} %)")
    print("status record (last run):", json.dumps(results[-1]["record"]))
    if args.json:
        print(json.dumps(results, default=str))
    ok = all(r["record"]["job_status"] == "success" and r["record"]["rows_synced"] == args.rows
             for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
