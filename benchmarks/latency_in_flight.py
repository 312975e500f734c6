"""Rows per second against a service that answers late, by `service.max_in_flight`.

The sandbox (lean, the real limits) delays every /users/track answer by `--delay` seconds (a
`delay` fault rule), as a service across a network does; an events integration of `--rows`
rows (the service's sync format) runs once per value of `max_in_flight`, each as its own
`engage-sync run FILE --no-prefect` process with a fresh state database. Requests leave at
most `max_in_flight` at a time, so the rate is bounded by max_in_flight / delay requests a
second (75 events each), whatever the machine.

    .venv/bin/python benchmarks/latency_in_flight.py [--rows 60000] [--delay 0.1] [4 8 32 64]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline_throughput import API_KEY, OBJECTS_PER_REQUEST, free_port, start_sandbox, stop
from user_command import BIN, _last_json, build_events, write_integration


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=60_000)
    p.add_argument("--delay", type=float, default=0.1, help="seconds each answer waits")
    p.add_argument("in_flight", nargs="*", type=int, default=[4, 8, 32, 64])
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-latency"))
    args = p.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    warehouse = work / f"events-{args.rows}.duckdb"
    if not warehouse.exists():
        build_events(warehouse, args.rows)
    port = free_port()
    sandbox = start_sandbox(port, True, work / "sandbox.log")
    base_url = f"http://127.0.0.1:{port}"
    rule = {"path": "/users/track", "action": "delay", "delay_seconds": args.delay}
    base = write_integration(work, warehouse, base_url, "events", None).read_text()
    try:
        for in_flight in args.in_flight:
            integration = work / f"events_{in_flight}.yaml"
            integration.write_text(base.replace(
                "  api_key_env: ENGAGE_API_KEY",
                f"  api_key_env: ENGAGE_API_KEY\n  max_in_flight: {in_flight}"))
            httpx.post(f"{base_url}/_sandbox/reset", timeout=30).raise_for_status()
            httpx.post(f"{base_url}/_sandbox/faults", json=[rule], timeout=30).raise_for_status()
            state = Path(tempfile.mkdtemp(dir=work)) / "state.db"
            env = {**os.environ, "ENGAGE_API_KEY": API_KEY,
                   "ENGAGE_SYNC_STATE_URL": f"sqlite:///{state}"}
            started = time.perf_counter()
            done = subprocess.run([str(BIN / "engage-sync"), "run", str(integration),
                                   "--no-prefect"], env=env, capture_output=True)
            wall = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"the run failed ({done.returncode}):\n"
                                 f"{done.stderr.decode()[-3000:]}")
            record = _last_json(done.stdout)
            bound = in_flight / args.delay * OBJECTS_PER_REQUEST
            print(f"max_in_flight {in_flight}: {record['rows_read'] / wall:,.0f} rows/s over "
                  f"the whole process (wall {wall:.1f} s; the bound {bound:,.0f} rows/s), "
                  f"{record['job_status']}", flush=True)
    finally:
        stop(sandbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
