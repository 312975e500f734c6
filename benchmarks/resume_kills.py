"""A run killed K times against the same run unkilled: the highest peak RSS of an attempt's
process tree (the run and its field helper) of each, and whether the killed one stays within
10 % of the unkilled one (a resume loads only its journal's frontier, `Journal.frontier`).

    python benchmarks/resume_kills.py [--rows 10000000] [--kills 5] [--repeat 1]

Each measurement is `load_checks.py kills` (the same warehouse, kept between them, the lean
sandbox, a SQLite state file, `engage-sync run --no-prefect`), with `--kills K` and with
`--kills 0`, one after the other, `--repeat` times; the medians of their highest peaks are
compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def highest_peak(rows: int, kills: int) -> float:
    """The highest peak RSS (MB) of the attempts of one `load_checks.py kills` run."""
    out = subprocess.run(
        [sys.executable, str(HERE / "load_checks.py"), "kills", "--rows", str(rows),
         "--kills", str(kills), "--keep-warehouse", "--json"],
        check=False, capture_output=True, text=True)
    last = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not last:
        raise SystemExit(f"load_checks.py kills failed:\n{out.stdout[-2000:]}\n"
                         f"{out.stderr[-2000:]}")
    result = json.loads(last[-1])
    if not result.get("ok"):
        raise SystemExit(f"load_checks.py kills found problems: {result.get('problems')}")
    return float(max(result["peak_rss_mb_min_max"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    killed, unkilled = [], []
    for k in range(args.repeat):
        killed.append(highest_peak(args.rows, args.kills))
        unkilled.append(highest_peak(args.rows, 0))
        print(f"pass {k + 1}: killed {killed[-1]:.0f} MB, unkilled {unkilled[-1]:.0f} MB",
              flush=True)
    a, b = statistics.median(killed), statistics.median(unkilled)
    print(json.dumps({"rows": args.rows, "kills": args.kills, "peak_mb_killed": a,
                      "peak_mb_unkilled": b, "ratio": round(a / b, 3),
                      "within_10_percent": a <= 1.1 * b}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
