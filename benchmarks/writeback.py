"""What the write-back adds to a large run: the same attributes run of N rows
(`diff: off`, one row in 1,000 rejected, so the run has outcomes to write), each
`pipeline_throughput.py --child` in its own process against the lean sandbox, in three cases
taken in turn:

- `base`: the package before the write-back (`--base-src`, a `git archive` of that commit),
  no write-back (what a row error keeps and what the cutter holds changed);
- `off`: this package, no `writeback` section;
- `on`: this package, `writeback: {}` (the run's record and its rejects written back to the
  same DuckDB file, after the run; the first `on` run creates the tables, later ones append,
  as a schedule's runs do).

Reports rows/s, the seconds of `sync_file` (pipeline time, write-back included) and the CPU
seconds of the sync's process in it (less disturbed by other work on the machine than wall
time) per run, their medians, and `on` against `off` and `base` in %.

    .venv/bin/python benchmarks/writeback.py [--rows 1000000] [--runs 3]
        [--base-src DIR] [--no-rate-limits]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_throughput import API_KEY, TABLE, build_warehouse, free_port, start_sandbox, stop

REJECT_EVERY = 1000


def build(path: Path, rows: int) -> None:
    """The throughput benchmark's warehouse, every REJECT_EVERY-th payload one the service's
    rules refuse (an attribute name starting with '$')."""
    import duckdb

    build_warehouse(path, rows)
    con = duckdb.connect(str(path))
    try:
        con.execute(f"UPDATE {TABLE} SET PAYLOAD = '{{\"$x\": 1}}' "
                    f"WHERE CAST(substr(EXTERNAL_ID, 6) AS BIGINT) % {REJECT_EVERY} = 0")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def integration(folder: Path, warehouse: Path, base_url: str, writeback: bool) -> Path:
    path = folder / f"bench_users_{'on' if writeback else 'off'}.yaml"
    path.write_text(
        f"kind: attributes\nwarehouse:\n  url: duckdb:///{warehouse}\n"
        f"source:\n  table: {TABLE}\npayload:\n  identifier: external_id\n"
        f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\n"
        "settle_lag: 0s\ndiff: 'off'\n" + ("writeback: {}\n" if writeback else ""), "utf-8")
    return path


def drop_tables(warehouse: Path) -> None:
    import duckdb

    con = duckdb.connect(str(warehouse))
    try:
        for table in ("engage_sync_runs", "engage_sync_row_outcomes"):
            con.execute(f"DROP TABLE IF EXISTS {table}")
    finally:
        con.close()


def written(warehouse: Path) -> tuple[int, int]:
    import duckdb

    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return tuple(int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index, return-value]
                     for t in ("engage_sync_runs", "engage_sync_row_outcomes"))
    finally:
        con.close()


def run(path: Path, state_db: Path, base_url: str, src: str | None) -> dict[str, Any]:
    httpx.post(f"{base_url}/_sandbox/reset", timeout=10).raise_for_status()
    state_db.unlink(missing_ok=True)
    child = Path(__file__).resolve().parent / "pipeline_throughput.py"
    env = {**os.environ, "ENGAGE_API_KEY": API_KEY}
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve())
    done = subprocess.run([sys.executable, str(child), "--child", str(path), str(state_db)],
                          stdout=subprocess.PIPE, env=env, check=True)
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    rec = result["record"]
    return {"wall": result["wall"], "cpu": result["cpu"],
            "rows_s": rec["rows_read"] / result["wall"],
            "rejected": rec["rows_rejected"], "package": result["package"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--base-src", default=None)
    p.add_argument("--no-rate-limits", action="store_true")
    args = p.parse_args()
    cases = (["base"] if args.base_src else []) + ["off", "on"]
    walls: dict[str, list[float]] = {c: [] for c in cases}
    cpus: dict[str, list[float]] = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        warehouse = work / "warehouse.duckdb"
        build(warehouse, args.rows)
        port = free_port()
        sandbox = start_sandbox(port, not args.no_rate_limits, work / "sandbox.log")
        base_url = f"http://127.0.0.1:{port}"
        try:
            drop_tables(warehouse)
            for k in range(args.runs):
                for case in cases:
                    path = integration(work, warehouse, base_url, case == "on")
                    r = run(path, work / "state.db", base_url,
                            args.base_src if case == "base" else None)
                    walls[case].append(r["wall"])
                    cpus[case].append(r["cpu"])
                    extra = f", written {written(warehouse)}" if case == "on" else ""
                    print(f"run {k + 1} {case}: {r['wall']:.2f} s ({r['cpu']:.2f} s CPU), "
                          f"{r['rows_s']:,.0f} rows/s, "
                          f"{r['rejected']} rejected ({r['package']}){extra}", flush=True)
        finally:
            stop(sandbox)
    medians = {c: statistics.median(w) for c, w in walls.items()}
    cpu = {c: statistics.median(w) for c, w in cpus.items()}
    for case, median in medians.items():
        print(f"{case}: median {median:.2f} s = {args.rows / median:,.0f} rows/s "
              f"({' / '.join(f'{w:.2f}' for w in walls[case])}); CPU median {cpu[case]:.2f} s "
              f"({' / '.join(f'{w:.2f}' for w in cpus[case])})")
    for other in [c for c in cases if c != "on"]:
        print(f"on against {other}: {100 * (medians['on'] / medians[other] - 1):+.1f} % wall, "
              f"{100 * (cpu['on'] / cpu[other] - 1):+.1f} % CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
