"""A no-change incremental run over a large table: how long the pipeline takes when nothing
moved since the last run (the target: under 3 s for 1,000,000 rows, `benchmarks/README.md`).

Builds the field-diff benchmark's warehouse (N users × 10 attributes, DuckDB), runs one first
sync (`diff: fields`, the default, and `diff: off`), then `--runs` incremental syncs with
nothing changed, each `pipeline_throughput.py --child` in its own process against the lean
sandbox; reports the seconds of `sync_file` (pipeline time, without imports) per run and
their median, and the requests the sandbox received (0 expected); then times the command a
user runs, `engage-sync run FILE --no-prefect`, as a whole process, as many times.

    .venv/bin/python benchmarks/no_change.py [--rows 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diff_throughput import build, integration, run
from pipeline_throughput import API_KEY, free_port, start_sandbox, stop


def whole_process(path: Path, state: Path) -> float:
    """Seconds of `engage-sync run FILE --no-prefect`, from start to exit."""
    cmd = [str(Path(sys.executable).parent / "engage-sync"), "run", str(path), "--no-prefect",
           "--state-url", f"sqlite:///{state}"]
    started = time.perf_counter()
    subprocess.run(cmd, env={**os.environ, "ENGAGE_API_KEY": API_KEY}, check=True,
                   capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        port = free_port()
        sandbox = start_sandbox(port, False, work / "sandbox.log")
        base_url = f"http://127.0.0.1:{port}"
        try:
            for diff in ("fields", "off"):
                warehouse, state = work / "warehouse.duckdb", work / f"state-{diff}.db"
                build(warehouse, args.rows)
                path = integration(work, warehouse, base_url, diff)
                first = run(path, state, base_url)
                print(f"diff {diff}: first run {first['read']:,} rows in {first['wall']:.1f} s")
                walls = []
                for k in range(args.runs):
                    r = run(path, state, base_url)
                    assert r["read"] == 0 and r["requests"] == 0, r
                    walls.append(r["wall"])
                    print(f"  no-change run {k + 1}: {r['wall']:.2f} s, {r['requests']} "
                          f"requests, peak RSS {r['rss_mb']:.0f} MB")
                print(f"diff {diff}: no-change run over {args.rows:,} rows, median "
                      f"{statistics.median(walls):.2f} s of pipeline time")
                whole = [whole_process(path, state) for _ in range(args.runs)]
                print(f"diff {diff}: `engage-sync run FILE --no-prefect`, nothing changed: "
                      f"{' / '.join(f'{w:.2f}' for w in whole)} s as a whole process")
        finally:
            stop(sandbox)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
