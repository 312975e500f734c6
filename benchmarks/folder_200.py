"""A folder of N integrations run side by side (`adapters/folder_runs.py`), timed, with the
connections it held at most.

    python benchmarks/folder_200.py [--integrations 200] [--rows 200] [--concurrency 4]
                                    [--repeat 3]

The folder of `load_checks.py folder` (a DuckDB warehouse of N tables of `rows` attribute rows
each, N integration files, the lean sandbox with its rate limits on loopback), the state
database on a throwaway PostgreSQL server. Each repeat starts on a fresh state database and
runs the folder as the `sync_folder` flow's body does (`folder_runs.run_folder`, each
integration through `wiring.sync_file`, one shared state store whose pool the setting sizes,
one set of rate budgets), without Prefect's task-run bookkeeping. Reports the wall time (the
median of the repeats), the most state connections pg_stat_activity showed (sampled every
0.1 s) and the most warehouse connections checked out at once (a pool event counter).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from load_checks import (
    STATE_DB,
    ConnectionPoller,
    _dsn,
    build_folder_warehouse,
    start_postgres,
    state_url,
    write_folder,
)
from pipeline_throughput import API_KEY, free_port, start_sandbox, stop


class Checkouts:
    """DuckDB connections checked out of any pool at once, at most."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()
        sa.event.listen(sa.engine.Engine, "checkout", self._out)
        sa.event.listen(sa.engine.Engine, "checkin", self._in)

    @staticmethod
    def _duckdb(dbapi: Any) -> bool:
        return "duckdb" in type(dbapi).__module__.lower()

    def _out(self, dbapi: Any, _record: Any, _proxy: Any) -> None:
        if self._duckdb(dbapi):
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)

    def _in(self, dbapi: Any, _record: Any) -> None:
        if dbapi is not None and self._duckdb(dbapi):
            with self.lock:
                self.now -= 1


def fresh_state(server: Any) -> None:
    import psycopg

    with psycopg.connect(_dsn(server, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {STATE_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {STATE_DB}")


def one_pass(folder: Path, url: str, server: Any, concurrency: int,
             checkouts: Checkouts) -> dict[str, Any]:
    from engage_sync.adapters import folder_runs
    from engage_sync.adapters.wiring import sync_file
    from engage_sync.deliver.ratelimit import RateBudgets

    fresh_state(server)
    budgets = RateBudgets()
    store = folder_runs.shared_state(url, concurrency)
    poller = ConnectionPoller(server)
    checkouts.most = 0
    poller.start()
    t0 = time.perf_counter()
    try:
        results = folder_runs.run_folder(
            sorted(folder.glob("*.yaml")),
            lambda p: sync_file(p, store=store, budgets=budgets).record, concurrency)
    finally:
        wall = time.perf_counter() - t0
        poller.stop()
        store.engine.dispose()
    failed = {k: str(v)[:200] for k, v in results.items() if isinstance(v, Exception)}
    synced = sum(int(v.get("rows_synced", 0)) for v in results.values()  # type: ignore[union-attr]
                 if isinstance(v, dict))
    return {"wall_s": round(wall, 2), "state_connections_max": poller.most,
            "warehouse_connections_max": checkouts.most, "failed": failed,
            "rows_synced": synced}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--integrations", type=int, default=200)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="folder-200-"))
    warehouse = workdir / "warehouse.duckdb"
    build_folder_warehouse(warehouse, args.integrations, args.rows)
    port = free_port()
    folder = workdir / "folder"
    write_folder(folder, warehouse, f"http://127.0.0.1:{port}", args.integrations)
    os.environ["ENGAGE_API_KEY"] = API_KEY
    sandbox = start_sandbox(port, True, workdir / "sandbox.log")
    server = start_postgres()
    checkouts = Checkouts()
    passes = []
    try:
        for k in range(args.repeat):
            passes.append(one_pass(folder, state_url(server), server, args.concurrency,
                                   checkouts))
            print(f"pass {k + 1}: {json.dumps(passes[-1])}", flush=True)
    finally:
        stop(sandbox)
        server.stop()
    summary = {"integrations": args.integrations, "rows_each": args.rows,
               "concurrency": args.concurrency,
               "wall_s_median": round(statistics.median(p["wall_s"] for p in passes), 2),
               "state_connections_max": max(p["state_connections_max"] for p in passes),
               "warehouse_connections_max": max(p["warehouse_connections_max"]
                                                for p in passes),
               "cpus": os.cpu_count()}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
