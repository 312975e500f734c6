"""The command line of the guards: `run --allow-points` (the spend cap, `run/spend_cap.py`)
and `trace` (one row's runs, `state/traces.py`: names and reasons, never a value)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_run_guards(run: argparse.ArgumentParser) -> None:
    """The guards' options of `engage-sync run`."""
    run.add_argument("--allow-points", type=int, default=None, metavar="N",
                     help="let this run bill up to N data points, above max_data_points and "
                          "max_data_points_per_day (its points still count toward the day)")


def add_trace(sub: Any) -> None:
    """`engage-sync trace FILE --key K`."""
    trace = sub.add_parser(
        "trace", help="what became of one row in each run that read it (trace: true)",
        description="Every run within the retention window that read the row: the run, its "
        "time and mode, the row's outcome, the attribute names sent and those left out as "
        "unchanged, the reject or failure reason and request number. Never a value.")
    trace.add_argument("integration", help="integration file, or its name")
    trace.add_argument("--key", required=True, help="the row key, as `engage-sync errors` shows")
    trace.add_argument("--state-url", default=None, help="SQLAlchemy URL of the state database")
    trace.add_argument("--json", action="store_true", help="print JSON instead of a table")
    trace.set_defaults(func=cmd_trace)


def cmd_trace(args: argparse.Namespace) -> int:
    from engage_sync.adapters.wiring import open_state
    from engage_sync.status.trace import as_json, traced

    rows = traced(open_state(args.state_url), Path(args.integration).stem, args.key)
    if args.json:  # the status server's trace endpoint answers the same list
        print(json.dumps(as_json(rows), indent=2))
        return 0
    if not rows:
        print("no traced run read this row (is `trace: true` set? runs before it are not traced)")
        return 0
    print(f"{'RUN':<6} {'STARTED (UTC)':<19}  {'MODE':<11} {'RUN STATUS':<13} {'OUTCOME':<9} "
          f"{'REQUEST':<7}  SENT / UNCHANGED / REASON")
    for r in rows:
        print(f"#{r['seq']:<5} {r['sync_start_time']:%Y-%m-%d %H:%M:%S}  {r['mode']:<11} "
              f"{r['job_status']:<13} {r['outcome']:<9} {r['request'] or '-'!s:<7}  "
              f"sent [{', '.join(r['sent'])}] unchanged [{', '.join(r['unchanged'])}]"
              f"{'  ' + r['reason'] if r['reason'] else ''}")
    return 0
