"""The field-level diff's cost and savings: `diff: fields` against `diff: off`, in one sitting.

Per repetition and per setting (`off`, then `fields`), on a fresh DuckDB warehouse of N users
× 10 attributes (the service's sync format, built in DuckDB SQL) and a fresh SQLite state DB:

1. first run: every row read and sent;
2. unchanged re-run: every row's UPDATED_AT moved, no value changed;
3. 1 % changed: one attribute (`plan`) changed on 1 % of the rows, only those rows moved;
4. touched + 1 %: every row's UPDATED_AT moved and `plan` changed on another 1 % of the rows.

Each run is `pipeline_throughput.py --child` (one `sync_file` in its own process, so peak RSS
is the sync's own; a first diffed run's helper process is reported apart, peak RSS and CPU)
against the lean sandbox with the service's real rate
limit. Reported per run: rows read, seconds of `sync_file`, rows/s, peak RSS, requests and
data points billed as the sandbox counted them, and the points the run's record says it sent
and saved; then medians over the repetitions.

    .venv/bin/python benchmarks/diff_throughput.py [--rows 1000000] [--reps 3] [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_throughput import API_KEY, TABLE, free_port, start_sandbox, stop

STEPS = ("first run", "unchanged re-run", "1 % changed", "touched + 1 %")
ATTRS = ", ".join(f"'a{k}', 'v{k}-' || (i % {97 + k})" for k in range(9))


def build(path: Path, rows: int) -> None:
    """N rows: UPDATED_AT, EXTERNAL_ID, PAYLOAD with `plan` and 9 more attributes."""
    import duckdb

    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    try:
        con.execute(f"""
            CREATE TABLE {TABLE} AS
            SELECT TIMESTAMP '2024-01-01 00:00:00' + to_microseconds((i // 4) * 1000)
                       AS UPDATED_AT, i AS N,
                   'user-' || lpad(i::VARCHAR, 9, '0') AS EXTERNAL_ID,
                   json_object('plan', 'free', {ATTRS}) AS PAYLOAD
            FROM range(?) t(i)""", [rows])
        con.execute("CHECKPOINT")
    finally:
        con.close()


def change(path: Path, step: int) -> None:
    """Prepare the warehouse for `STEPS[step]`."""
    import duckdb

    moved = f"UPDATED_AT = UPDATED_AT + INTERVAL {step} DAY"
    plan = f"PAYLOAD = json_object('plan', 'plan-{step}', {ATTRS.replace('i %', 'N %')})"
    sql = {1: f"UPDATE {TABLE} SET {moved}",
           2: f"UPDATE {TABLE} SET {moved}, {plan} WHERE N % 100 = 2",
           3: f"UPDATE {TABLE} SET {moved}, PAYLOAD = CASE WHEN N % 100 = 3 THEN "
              f"{plan.split(' = ', 1)[1]} ELSE PAYLOAD END"}[step]
    con = duckdb.connect(str(path))
    try:
        con.execute(sql)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def integration(folder: Path, warehouse: Path, base_url: str, diff: str) -> Path:
    path = folder / f"bench_diff_{diff}.yaml"
    path.write_text(
        f"kind: attributes\nwarehouse:\n  url: duckdb:///{warehouse}\n"
        f"source:\n  table: {TABLE}\npayload:\n  identifier: external_id\n"
        f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\n"
        f"settle_lag: 0s\ndiff: {diff}\n", "utf-8")
    return path


def run(path: Path, state_db: Path, base_url: str) -> dict[str, Any]:
    httpx.post(f"{base_url}/_sandbox/reset", timeout=10).raise_for_status()
    child = Path(__file__).resolve().parent / "pipeline_throughput.py"
    proc = subprocess.Popen([sys.executable, str(child), "--child", str(path), str(state_db)],
                            stdout=subprocess.PIPE, env={**os.environ, "ENGAGE_API_KEY": API_KEY})
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("sync child failed")
    result = json.loads(out.decode().strip().splitlines()[-1])
    counters = httpx.get(f"{base_url}/_sandbox/counters", timeout=10).json()
    rec = result["record"]
    read = rec["rows_read"] + rec["rows_unchanged"]
    return {"read": read, "wall": result["wall"], "rows_s": read / result["wall"],
            "rss_mb": result.get("maxrss_self_kb", usage.ru_maxrss) / 1024,
            "helper_mb": result.get("maxrss_children_kb", 0) / 1024,
            "helper_cpu": result.get("cpu_children", 0.0),
            "requests": int(counters["requests"].get("/users/track", 0)),
            "billed": int(counters["data_points"]), "sent": rec["data_points_sent"],
            "saved": rec["data_points_saved"], "status": rec["job_status"]}


def sitting(args: argparse.Namespace, work: Path, base_url: str) -> dict[tuple[str, int], list]:
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rep in range(args.reps):
        for diff in ("off", "fields"):
            warehouse, state = work / "warehouse.duckdb", work / f"state-{diff}-{rep}.db"
            build(warehouse, args.rows)
            path = integration(work, warehouse, base_url, diff)
            for step, name in enumerate(STEPS):
                if step:
                    change(warehouse, step)
                r = run(path, state, base_url)
                results.setdefault((diff, step), []).append(r)
                print(f"rep {rep + 1} diff {diff:6} {name:17} {json.dumps(r)} "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            for suffix in ("", "-wal", "-shm"):
                Path(f"{state}{suffix}").unlink(missing_ok=True)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-diff-bench"))
    p.add_argument("--src", help="run the sync from this source folder (a `git archive` copy)")
    args = p.parse_args()
    if args.src:
        os.environ["PYTHONPATH"] = str(Path(args.src).resolve())
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    sandbox = start_sandbox(port, True, work / "sandbox.log")
    started = time.monotonic()
    try:
        results = sitting(args, work, f"http://127.0.0.1:{port}")
    finally:
        stop(sandbox)
    print(f"\nmedians of {args.reps} ({time.monotonic() - started:.0f} s in all), "
          f"{args.rows:,} users x 10 attributes:")
    print("| run | diff | rows read | s | rows/s | peak RSS MB | helper peak RSS MB | helper "
          "CPU s | requests | points billed | points saved |")
    for step, name in enumerate(STEPS):
        for diff in ("off", "fields"):
            rs = results[(diff, step)]

            def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
                return statistics.median(r[key] for r in rs)
            print(f"| {name} | {diff} | {med('read'):,.0f} | {med('wall'):.1f} | "
                  f"{med('rows_s'):,.0f} | {med('rss_mb'):.0f} | {med('helper_mb'):.0f} | "
                  f"{med('helper_cpu'):.1f} | {med('requests'):,.0f} | "
                  f"{med('billed'):,.0f} | {med('saved'):,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
