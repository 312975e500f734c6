"""`changes: snapshot` against `--mode full_resync` with the field diff, on a large model with
1 % of its rows changed between runs (issue 45's benchmark).

One DuckDB model of N users × 10 attributes (`plan` and nine more, an `UPDATED_AT` for the
cursor integration), two integrations on it with the same mapping: `changes: snapshot`, and a
cursor integration with `diff: fields`. Each is first run once to fill its state (the
snapshot; the field record), then, per repetition, `plan` is changed on 1 % of the rows and
the snapshot integration is run (`--snapshot-runs` times), the full resync once (or
`--resync-runs`): each run is `engage-sync run FILE --no-prefect` as a whole process against
the lean sandbox (the service's limits). Reported per run: wall seconds, CPU seconds of the
command and every process it started (user + system, from `wait4`), the peak of the sum of
the RSS of all its processes (sampled every 50 ms), requests and points the sandbox counted;
then medians and the ratios the issue sets (wall ≤ 1/5, CPU ≤ 1/10, peak ≤ 300 MB).

    .venv/bin/python benchmarks/snapshot_10m.py [--rows 10000000] [--snapshot-runs 3]
        [--resync-runs 1] [--workdir DIR] [--keep-warehouse]
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
from pipeline_throughput import API_KEY, free_port, start_sandbox, stop
from user_command import TreeRss

TABLE = "MODEL"
ATTRIBUTES = ["plan", *(f"a{k}" for k in range(9))]


def build(path: Path, rows: int) -> None:
    """N rows: UPDATED_AT, N, EXTERNAL_ID and 10 text attributes, in DuckDB SQL."""
    import duckdb

    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    try:
        others = ", ".join(f"'v{k}-' || (i % {97 + k}) AS a{k}" for k in range(9))
        con.execute(f"""
            CREATE TABLE {TABLE} AS
            SELECT TIMESTAMP '2024-01-01' + to_microseconds(i) AS UPDATED_AT, i AS N,
                   'user-' || lpad(i::VARCHAR, 9, '0') AS EXTERNAL_ID, 'free' AS plan, {others}
            FROM range(?) t(i)""", [rows])
        con.execute("CHECKPOINT")
    finally:
        con.close()


def change(path: Path, rep: int) -> None:
    """`plan` changed on 1 % of the rows (another 1 % each repetition), their UPDATED_AT
    moved, as a rebuilt model would."""
    import duckdb

    con = duckdb.connect(str(path))
    try:
        con.execute(f"UPDATE {TABLE} SET plan = 'plan-{rep}', UPDATED_AT = UPDATED_AT + "
                    f"INTERVAL {rep + 1} DAY WHERE N % 100 = {rep % 100}")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def integration(folder: Path, warehouse: Path, base_url: str, snapshot: bool) -> Path:
    name = "bench_snapshot" if snapshot else "bench_resync"
    attrs = "".join(f"    {a}: {a}\n" for a in ATTRIBUTES)
    path = folder / f"{name}.yaml"
    path.write_text(
        f"kind: attributes\nwarehouse:\n  url: duckdb:///{warehouse}\n"
        f"source:\n  table: {TABLE}\n"
        f"mapping:\n  identifier:\n    external_id: EXTERNAL_ID\n  attributes:\n{attrs}"
        f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\nsettle_lag: 0s\n"
        + ("changes: snapshot\n" if snapshot else "diff: fields\n"), "utf-8")
    return path


def run(path: Path, state: Path, base_url: str, mode: str = "incremental") -> dict[str, Any]:
    """One whole `engage-sync run` process: wall, CPU, peak RSS sum, the sandbox's counts."""
    httpx.post(f"{base_url}/_sandbox/reset", timeout=30).raise_for_status()
    cmd = [str(Path(sys.executable).parent / "engage-sync"), "run", str(path), "--no-prefect",
           "--state-url", f"sqlite:///{state}", "--mode", mode]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, "ENGAGE_API_KEY": API_KEY},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sampler = TreeRss(proc.pid)
    sampler.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # the command and the processes it waited for
    wall = time.perf_counter() - started
    sampler.done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.decode(errors='replace')[-3000:]}")
    counters = httpx.get(f"{base_url}/_sandbox/counters", timeout=30).json()
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_sum_mb": round(sampler.peak_sum, 1),
            "requests": int(counters["requests"].get("/users/track", 0)),
            "points": int(counters["data_points"]),
            "load": round(os.getloadavg()[0], 1)}


def sitting(args: argparse.Namespace, work: Path, base_url: str) -> dict[str, list[dict]]:
    warehouse = work / "model.duckdb"
    if not (args.keep_warehouse and warehouse.exists()):
        started = time.monotonic()
        build(warehouse, args.rows)
        print(f"model: {args.rows:,} rows in {time.monotonic() - started:.0f} s", flush=True)
    snap, resync = (integration(work, warehouse, base_url, s) for s in (True, False))
    states = {"snapshot": work / "state-snapshot.db", "full_resync": work / "state-resync.db"}
    for name, path in (("snapshot", snap), ("full_resync", resync)):
        first = run(path, states[name], base_url)
        print(f"first run ({name}): {json.dumps(first)}", flush=True)
    results: dict[str, list[dict]] = {"snapshot": [], "full_resync": []}
    for rep in range(max(args.snapshot_runs, args.resync_runs)):
        change(warehouse, rep)
        if rep < args.snapshot_runs:
            results["snapshot"].append(run(snap, states["snapshot"], base_url))
            print(f"rep {rep + 1} snapshot: {json.dumps(results['snapshot'][-1])}", flush=True)
        if rep < args.resync_runs:
            results["full_resync"].append(run(resync, states["full_resync"], base_url,
                                              "full_resync"))
            print(f"rep {rep + 1} full_resync: {json.dumps(results['full_resync'][-1])}",
                  flush=True)
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--snapshot-runs", type=int, default=3)
    p.add_argument("--resync-runs", type=int, default=1)
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-snap-bench"))
    p.add_argument("--keep-warehouse", action="store_true",
                   help="reuse the model left in --workdir (the state databases are made anew)")
    args = p.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("state-*"):
        old.unlink()
    port = free_port()
    sandbox = start_sandbox(port, True, work / "sandbox.log")
    try:
        results = sitting(args, work, f"http://127.0.0.1:{port}")
    finally:
        stop(sandbox)
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for name, rs in results.items()}
    s, f = med["snapshot"], med["full_resync"]
    print(f"\nmedians, {args.rows:,} users x 10 attributes, 1 % changed: {json.dumps(med)}")
    print(f"snapshot / full_resync: wall {s['wall_s'] / f['wall_s']:.3f} (target <= 0.2), "
          f"CPU {s['cpu_s'] / f['cpu_s']:.3f} (<= 0.1), snapshot peak "
          f"{s['peak_rss_sum_mb']:.0f} MB (<= 300)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
