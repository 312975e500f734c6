"""The opt-in process tuning against the code from before it was made opt-in, in one sitting.

Three configurations, each `engage-sync run FILE --no-prefect` from a checkout's own venv:

- A: the BEFORE checkout with its defaults (the CPU pin and the collector's tuning were on);
- B: the AFTER checkout with ENGAGE_SYNC_PIN_CPU=auto and ENGAGE_SYNC_TUNE_GC=on (opt-in);
- C: the AFTER checkout with its defaults (no tuning).

Three workloads: `first-load` (N attribute rows, a first diffed run, fresh state), `field-diff`
(the same N rows, every UPDATED_AT moved and no value changed: an unchanged re-run, its state
copied from one untimed first run of the same configuration) and `events` (N event rows, fresh
state). Rounds run A B C for each workload in turn, so that a change in the machine's load
falls on all three alike; run k of R starts (k + 0.5) / R of the way into one of the sandbox's
3-s windows (`user_command.py`). One lean sandbox with the service's limit, from the checkout
this script is in, serves every run.

Each run is timed by `/usr/bin/time -v`: elapsed, user + system CPU (the process and the
children it waited for: the field helper) and its peak RSS; rows/s = rows read
÷ elapsed. Also the sandbox's CPU and the 1-minute load average at each run's start. Then
medians per configuration and the per-round ratios B/A and C/A (median, min, max).

    .venv/bin/python benchmarks/tuning_ab.py BEFORE_CHECKOUT AFTER_CHECKOUT [--rows 1000000]
        [--rounds 5] [--workloads first-load,field-diff,events] [--workdir DIR] [--json]

(each checkout with its venv in `.venv`: e.g. `git worktree add --detach ../before REV`,
then `python3 -m venv .venv && .venv/bin/pip install -e .` there).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_throughput import API_KEY, TABLE, build_warehouse, free_port, start_sandbox, stop
from user_command import WINDOW, _last_json, _process_cpu, build_events, write_integration

TUNED = {"ENGAGE_SYNC_PIN_CPU": "auto", "ENGAGE_SYNC_TUNE_GC": "on"}
CONFIGS = ("A", "B", "C")
WORKLOADS = ("first-load", "field-diff", "events")
TIME_FIELDS = {"Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall_s",
               "User time (seconds)": "user_s", "System time (seconds)": "sys_s",
               "Maximum resident set size (kbytes)": "max_rss_kb"}


def checkouts(before: Path, after: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    """Each configuration: its checkout and the tuning settings it runs with (others unset)."""
    for tree in (before, after):
        if not (tree / ".venv" / "bin" / "engage-sync").exists():
            raise SystemExit(f"{tree}: no .venv/bin/engage-sync (make the checkout's venv)")
    return {"A": (before, {}), "B": (after, TUNED), "C": (after, {})}


def seconds(text: str) -> float:
    """`/usr/bin/time`'s elapsed (h:mm:ss or m:ss.ss) in seconds."""
    total = 0.0
    for part in text.split(":"):
        total = total * 60 + float(part)
    return total


def parse_time(report: str) -> dict[str, float]:
    """The fields of `/usr/bin/time -v` this benchmark reads."""
    out: dict[str, float] = {}
    for line in report.splitlines():
        name, _, value = line.strip().rpartition(": ")
        if name in TIME_FIELDS:
            out[TIME_FIELDS[name]] = seconds(value) if "wall" in name else float(value)
    return out


def one_run(tree: Path, tuning: dict[str, str], integration: Path, state: Path | None,
            work: Path, base_url: str, sink_pid: int, phase: float | None,
            keep: Path | None = None) -> dict[str, Any]:
    """One `engage-sync run --no-prefect` of `tree`'s venv under `/usr/bin/time -v`, with a
    fresh state file (a copy of `state` when given; moved to `keep` after the run, else
    removed with the run's folder)."""
    run_dir = Path(tempfile.mkdtemp(dir=work))
    if state is not None:
        shutil.copyfile(state, run_dir / "state.db")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ENGAGE_SYNC_PIN_CPU", "ENGAGE_SYNC_TUNE_GC", "PYTHONPATH",
                        "PYTHONDONTWRITEBYTECODE", "PREFECT_API_URL")}
    env.update(tuning, ENGAGE_API_KEY=API_KEY, ENGAGE_SYNC_STATE_URL=f"sqlite:///{run_dir}/state.db",
               PREFECT_HOME=str(run_dir / "prefect"), DO_NOT_TRACK="1")
    timing = run_dir / "time.txt"
    cmd = ["/usr/bin/time", "-v", "-o", str(timing), str(tree / ".venv/bin/engage-sync"), "run",
           str(integration), "--no-prefect"]
    httpx.post(f"{base_url}/_sandbox/reset", timeout=30).raise_for_status()
    if phase is not None:
        time.sleep((phase - time.time()) % WINDOW)
    load, sink = os.getloadavg()[0], _process_cpu(sink_pid)
    proc = subprocess.run(cmd, env=env, capture_output=True, cwd=tree)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.decode()[-3000:]}")
    record, times = _last_json(proc.stdout), parse_time(timing.read_text())
    requests = httpx.get(f"{base_url}/_sandbox/counters", timeout=30).json()["requests"]
    rows = int(record["rows_read"])  # unchanged rows are among those read
    result = {"rows": rows, "rows_per_s": rows / times["wall_s"], **times,
              "cpu_s": round(times["user_s"] + times["sys_s"], 2),
              "sink_cpu_s": round(_process_cpu(sink_pid) - sink, 2), "load1": load,
              "requests": int(requests.get("/users/track", 0)),
              "job_status": record["job_status"],
              # what the pin did (the CPU chosen, moved, let go): a run that lost it is slower
              "pin_log": [line.split("engage_sync.", 1)[-1][:160] for line in
                          proc.stderr.decode(errors="replace").splitlines() if "CPU" in line][-4:]}
    if keep is not None:
        with sqlite3.connect(run_dir / "state.db") as con:  # the WAL into the file
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        shutil.move(run_dir / "state.db", keep)
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def moved(source: Path, target: Path) -> None:
    """A copy of the attributes warehouse with every UPDATED_AT a day later, values unchanged."""
    shutil.copyfile(source, target)
    con = duckdb.connect(str(target))
    try:
        con.execute(f"UPDATE {TABLE} SET UPDATED_AT = UPDATED_AT + INTERVAL 1 DAY")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def prepare(args: argparse.Namespace, work: Path, base_url: str) -> dict[str, Path]:
    """The warehouses and the integration file of each workload (the re-run's has the first
    load's name, in its own folder, so that it reads the first load's state)."""
    attributes, rerun, events = (work / f"attributes-{args.rows}.duckdb",
                                 work / f"attributes-moved-{args.rows}.duckdb",
                                 work / f"events-{args.rows}.duckdb")
    if not attributes.exists():
        build_warehouse(attributes, args.rows)
        moved(attributes, rerun)
    if not events.exists():
        build_events(events, args.rows)
    files = {}
    for name, kind, warehouse in (("first-load", "attributes", attributes),
                                  ("field-diff", "attributes", rerun),
                                  ("events", "events", events)):
        folder = work / name
        folder.mkdir(exist_ok=True)
        files[name] = write_integration(folder, warehouse, base_url, kind, "fields"
                                        if kind == "attributes" else None)
    return files


def first_states(configs: dict[str, tuple[Path, dict[str, str]]], files: dict[str, Path],
                 work: Path, base_url: str, sink_pid: int) -> dict[str, Path]:
    """Per configuration, the state one untimed first load leaves (its own code wrote it)."""
    states = {}
    for name, (tree, tuning) in configs.items():
        states[name] = work / f"state-first-{name}.db"
        r = one_run(tree, tuning, files["first-load"], None, work, base_url, sink_pid, None,
                    keep=states[name])
        print(f"first load for {name}'s re-run state: {r['rows_per_s']:,.0f} rows/s", flush=True)
    return states


def sitting(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """The rounds: per round, per workload, A B C; one JSON line a run."""
    configs = checkouts(Path(args.before).resolve(), Path(args.after).resolve())
    for tree in {t for t, _ in configs.values()}:  # as an install has it: bytecode cached
        subprocess.run([str(tree / ".venv/bin/python"), "-m", "compileall", "-q", "src"],
                       cwd=tree, check=True)
    port = free_port()
    sandbox = start_sandbox(port, True, work / "sandbox.log")
    base_url, results = f"http://127.0.0.1:{port}", []
    try:
        files = prepare(args, work, base_url)
        workloads = args.workloads.split(",")
        states = first_states(configs, files, work, base_url, sandbox.pid) \
            if "field-diff" in workloads else {}
        for k in range(args.rounds):
            for workload in workloads:
                for name, (tree, tuning) in configs.items():
                    r = one_run(tree, tuning, files[workload], states.get(name)
                                if workload == "field-diff" else None, work, base_url,
                                sandbox.pid, (k + 0.5) * WINDOW / args.rounds)
                    r.update(round=k + 1, workload=workload, config=name)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        stop(sandbox)
    return results


def summary(results: list[dict[str, Any]]) -> list[str]:
    """Medians per workload and configuration, and the per-round ratios to A."""
    lines = ["| workload | config | rows/s | CPU s | peak MB | rows/s ÷ A's, per round "
             "(median, min-max) | CPU s ÷ A's |",
             "|---|---|---|---|---|---|---|"]
    for workload in dict.fromkeys(r["workload"] for r in results):
        runs = {c: {r["round"]: r for r in results if r["workload"] == workload
                    and r["config"] == c} for c in CONFIGS}
        for c in CONFIGS:
            rs = list(runs[c].values())
            cells = [f"{statistics.median(r['rows_per_s'] for r in rs):,.0f}",
                     f"{statistics.median(r['cpu_s'] for r in rs):.2f}",
                     f"{statistics.median(r['max_rss_kb'] for r in rs) / 1024:.0f}"]
            for key in ("rows_per_s", "cpu_s") if c != "A" else ():
                q = [runs[c][k][key] / runs["A"][k][key] for k in runs[c] if k in runs["A"]]
                cells.append(f"{statistics.median(q):.3f} ({min(q):.3f}-{max(q):.3f})")
            cells += [""] * (5 - len(cells))  # A: no ratio to itself
            lines.append(f"| {workload} | {c} | " + " | ".join(cells) + " |")
    loads = [r["load1"] for r in results]
    lines.append(f"load average (1 min) at the runs' starts: median {statistics.median(loads):.2f},"
                 f" {min(loads):.2f}-{max(loads):.2f}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", help="checkout of the code before (configuration A), with .venv")
    p.add_argument("after", help="checkout of the code after (B tuned, C default), with .venv")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-tuning-ab"))
    p.add_argument("--json", action="store_true", help="all runs as one JSON list at the end")
    args = p.parse_args()
    if unknown := set(args.workloads.split(",")) - set(WORKLOADS):
        raise SystemExit(f"--workloads: unknown {sorted(unknown)}; known {list(WORKLOADS)}")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = sitting(args, work)
    print("\n".join(summary(results)))
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
