"""What a user runs, timed as a whole: `engage-sync run FILE` (a Prefect flow run on a temporary
server, as a run without PREFECT_API_URL does with ENGAGE_SYNC_PREFECT_SERVER=temporary;
`prefect-background`: without PREFECT_API_URL, the
first run starting a server in the background that later runs use, as `engage-sync run` does
now; `prefect-served`: on a server already running,
as a deployment's run is) and `engage-sync run FILE --no-prefect`, each as its own process;
`dlt`: the same attributes load written with dlt (`dlt_track.py`, run by `--dlt-python`).

Per case it builds (or reuses) a DuckDB warehouse of N rows, starts the lean sandbox on
127.0.0.1 (with the service's real /users/track limit, or none with --no-rate-limits), then
runs the command `--runs` times (alternating the two paths) with a fresh state database and
Prefect home each time, and reports:

(With the service's limit, run k of R starts (k + 0.5) / R of the way into one of the
sandbox's 3-s windows, for every path (`start_phase_s`): where a run's requests fall in the
windows moves its stream by up to 1.9 s (`window_phase.py`), and runs started at a steady pace
sample the same few phases; spread evenly, their median stands for a run started at random.)


- rows/s over the whole process (imports, a temporary Prefect server if any, the sync, exit);
- the peak RSS of every process of the command's tree (the CLI, a temporary Prefect server),
  sampled from /proc every 50 ms, and their sum at its peak;
- requests the sandbox received against the minimum ceil(N / 75);
- CPU seconds (user + system) of the command's processes, each waited for by its parent
  (the CLI, a field helper, a temporary Prefect server; not a running server's);
- the CLI's threads' user and system CPU seconds, by thread name (`thread_cpu_s`);
- when the sandbox received the first and the last request, from the command's start, and
  the command's time after the last (`timeline_s`); of that, on a first diffed run, the
  field helper's write of the record (`helper_s`, from the run's log line);
- with --profile: where the time goes, from py-spy samples of every thread of the CLI
  process (read, transform, pack, send, journal, Prefect, imports, other).

    .venv/bin/python benchmarks/user_command.py [--rows 1000000] [--kind attributes|events]
        [--runs 3] [--paths prefect,prefect-served,prefect-background,no-prefect,dlt]
        (any engage-sync path may end in `+pin`, `+gc` or `+tuned`: ENGAGE_SYNC_PIN_CPU=auto,
        ENGAGE_SYNC_TUNE_GC=on, or both; `+off`: both off, as unset;
        then in `@before`: the code of --before REVISION)
        [--no-rate-limits]
        [--diff off|fields] [--profile] [--state sqlite|postgres]
        [--workdir DIR] [--json] [--neighbours N] [--before REVISION] [--max-in-flight N]
        [--warehouse-query '?memory_limit=96MB'] (options on the DuckDB URL)
        [--mapped] (attributes through `mapping:`, PAYLOAD's text as one attribute, in place of
        the sync format: read with each user's later rows counted, `superseded_rows: skip`)
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline_throughput import (
    API_KEY,
    OBJECTS_PER_REQUEST,
    PAGE,
    build_warehouse,
    free_port,
    start_sandbox,
    stop,
    warehouse_rows,
)

from engage_sync.deliver.ratelimit import DEFAULT_RATES
from engage_sync.pack.request import USERS_TRACK
from tests.pg_server import PostgresServer
from tests.prefect.conftest import _stop as stop_server
from tests.prefect.conftest import start_prefect_server

BIN = Path(sys.executable).parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time
WINDOW = DEFAULT_RATES[USERS_TRACK][1]  # the sandbox's windows: epoch multiples of it
EVENTS_TABLE = "EVENTS_SYNC"

# Leaf frames where a thread waits (for the service's answer, a lock, a pool slot): not CPU.
WAITS = ("SyncStream.read (httpcore", "Condition.wait (threading", "Event.wait (threading",
         "wait (concurrent/futures", "Thread.join (threading", "_wait_for_tstate_lock")
# Frames that mark a stage, first match wins (most specific first).
STAGES = (
    ("journal", ("engage_sync/state/",)),
    ("diff", ("engage_sync/diff/",)),
    ("send", ("engage_sync/deliver/", "httpx/", "httpcore/", "engage_sync/run/send_loop.py",
              "engage_sync/run/exact_journal.py", "engage_sync/run/grouped_journal.py")),
    ("pack", ("engage_sync/pack/", "engage_sync/kinds/track_packer.py",
              "engage_sync/run/cutter.py")),
    ("transform", ("engage_sync/kinds/",)),
    ("read", ("engage_sync/read/", "duckdb")),
    ("prefect", ("prefect/",)),
    ("imports", ("<frozen importlib._bootstrap",)),
)


def build_events(path: Path, rows: int) -> None:
    """N event rows in the service's sync format: UPDATED_AT, EXTERNAL_ID, EVENT_ID, PAYLOAD."""
    import duckdb

    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    con.execute(f"""
        CREATE TABLE {EVENTS_TABLE} AS
        SELECT TIMESTAMP '2024-01-01' + to_microseconds(CAST(i * 250 AS BIGINT)) AS UPDATED_AT,
               'u' || lpad(CAST(i % 100000 AS VARCHAR), 7, '0') AS EXTERNAL_ID,
               'e' || lpad(CAST(i AS VARCHAR), 9, '0') AS EVENT_ID,
               '{{"name":"viewed","properties":{{"sku":"' || CAST(i % 977 AS VARCHAR)
                 || '","price":' || CAST(i % 50 AS VARCHAR) || '}}}}' AS PAYLOAD
        FROM range({rows}) t(i)""")
    con.close()


def write_integration(folder: Path, warehouse: Path, base_url: str, kind: str,
                      diff: str | None = None, max_in_flight: int | None = None,
                      url_query: str = "", mapped: bool = False) -> Path:
    table = EVENTS_TABLE if kind == "events" else "USERS_SYNC"
    shape = ("mapping:\n  identifier: {external_id: EXTERNAL_ID}\n  attributes: "
             "{PAYLOAD: payload}\n") if mapped else "payload:\n  identifier: external_id\n"
    key = "row_key: [EVENT_ID]\n" if kind == "events" else ""
    key += f"diff: '{diff}'\n" if diff else ""  # attributes only; else the default (fields)
    path = folder / f"bench_{kind}.yaml"
    path.write_text(
        f"kind: {kind}\nwarehouse:\n  url: duckdb:///{warehouse}{url_query}\nsource:\n"
        f"  table: {table}\n"
        f"{key}{shape}"
        f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\n"
        + (f"  max_in_flight: {max_in_flight}\n" if max_in_flight else "") + "settle_lag: 0s\n",
        "utf-8")
    return path


class TreeRss(threading.Thread):
    """Samples the RSS of a process and its descendants; keeps each one's peak and the
    peak of their sum."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.done = pid, threading.Event()
        self.peaks: dict[str, float] = {}
        self.peak_sum = 0.0
        self.threads: dict[int, tuple[str, float, float]] = {}  # the CLI's: tid -> (name,
        # user s, system s)

    def run(self) -> None:
        while not self.done.is_set():
            total = 0.0
            for pid, name in self._tree():
                rss = _rss_mb(pid)
                total += rss
                self.peaks[name] = max(self.peaks.get(name, 0.0), rss)
            self.peak_sum = max(self.peak_sum, total)
            self._sample_threads()
            self.done.wait(0.05)

    def _sample_threads(self) -> None:
        """The last CPU seconds seen of each thread of the CLI process (a thread's time is
        lost from the process's total view once it exits, so each is kept as last seen)."""
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                head, tail = Path(f"/proc/{self.pid}/task/{tid}/stat").read_text().rsplit(") ", 1)
            except OSError:
                continue
            fields = tail.split()
            self.threads[int(tid)] = (head.split(" (", 1)[1], int(fields[11]) / CLOCK_TICKS,
                                      int(fields[12]) / CLOCK_TICKS)

    def thread_cpu(self) -> dict[str, list[float]]:
        """[user, system] CPU seconds by thread name (the main thread as `main`), threads of a
        name summed: on loopback the kernel's share is the TCP of both ends."""
        out: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
        for tid, (name, user, system) in self.threads.items():
            both = out["main" if tid == self.pid else name]
            both[0] += user
            both[1] += system
        return {k: [round(v[0], 2), round(v[1], 2)]
                for k, v in sorted(out.items(), key=lambda kv: -sum(kv[1]))}

    def _tree(self) -> list[tuple[int, str]]:
        children: dict[int, list[int]] = collections.defaultdict(list)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    ppid = int(Path(f"/proc/{entry}/stat").read_text().split(") ")[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children[ppid].append(int(entry))
        out, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            out.append((pid, _name(pid)))
            todo += children.get(pid, [])
        return out


def _rss_mb(pid: int) -> float:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


def _name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    words = [a.decode(errors="replace") for a in argv if a]
    if any("prefect" in w and "server" in " ".join(words) for w in words):
        return "prefect server"
    if any(w.endswith("engage-sync") or "engage_sync" in w for w in words):
        return "engage-sync"
    return Path(words[0]).name if words else str(pid)


PINS = {  # a path's suffix → the opt-in tuning settings it sets (the others unset: off)
    "+pin": {"ENGAGE_SYNC_PIN_CPU": "auto"},
    "+gc": {"ENGAGE_SYNC_TUNE_GC": "on"},
    "+tuned": {"ENGAGE_SYNC_PIN_CPU": "auto", "ENGAGE_SYNC_TUNE_GC": "on"},
    "+off": {"ENGAGE_SYNC_PIN_CPU": "off", "ENGAGE_SYNC_TUNE_GC": "off"},
}
BEFORE = "@before"


def pin_of(path: str) -> dict[str, str]:
    """The tuning settings for a path (without its `@before`): by its suffix, else none (unset:
    the defaults, off)."""
    return next((v for k, v in PINS.items() if path.removesuffix(BEFORE).endswith(k)), {})


def base_path(path: str) -> str:
    """A path without its `@before` (the code of --before) and its pin suffix (`PINS`)."""
    path = path.removesuffix(BEFORE)
    return next((path.removesuffix(k) for k in PINS if path.endswith(k)), path)


def code_of(revision: str, workdir: Path) -> Path:
    """The package's source at `revision` (`git archive`), for PYTHONPATH: a path ending in
    `@before` runs it instead of the working tree, in the same sitting."""
    where = workdir / f"src-{revision}"
    if not where.exists():
        where.mkdir()
        archive = subprocess.run(["git", "archive", revision, "src"], check=True,
                                 capture_output=True, cwd=Path(__file__).resolve().parents[1])
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where / "src"


def one_run(path: str, integration: Path, workdir: Path, base_url: str,
            profile: Path | None, served: tuple[str, Path] | None = None,
            dlt: tuple[str, Path] | None = None, state_url: str | None = None,
            sink_pid: int | None = None, before: Path | None = None,
            phase: float | None = None) -> dict[str, Any]:
    """One command, timed whole. `served`: (API URL, PREFECT_HOME) of a running Prefect
    server, for the `prefect-served` path (a flow run on a server that is already up, as a
    deployment's run is); the `prefect` path starts a temporary server, as a run without
    PREFECT_API_URL does. `state_url`: a PostgreSQL state database, emptied first (else a
    fresh SQLite file). A path ending in a suffix of `PINS` is that path with its settings
    (ENGAGE_SYNC_PIN_CPU=auto: the run's process on one CPU, its field helper on the others;
    ENGAGE_SYNC_TUNE_GC=on: the collector tuned); the other paths run with them unset. A path
    ending in `@before` runs the code in `before` (`code_of`). `phase`: the command starts
    this many seconds into one of the sandbox's windows (None: at once)."""
    name = path
    old = path.endswith(BEFORE)
    path, pin = base_path(path), pin_of(path)
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    if state_url is not None:
        empty_database(state_url)
    env = {**os.environ, "ENGAGE_API_KEY": API_KEY, "PREFECT_HOME": str(run_dir / "prefect"),
           "ENGAGE_SYNC_STATE_URL": state_url or f"sqlite:///{run_dir / 'state.db'}",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    env.pop("ENGAGE_SYNC_PIN_CPU", None)
    env.pop("ENGAGE_SYNC_TUNE_GC", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install reads cached bytecode
    env.update(pin)
    if old:
        assert before is not None, "a path ending in @before needs --before"
        env["PYTHONPATH"] = str(before)
    env["ENGAGE_SYNC_PREFECT_SERVER"] = "temporary"  # the `prefect` path: Prefect's own
    if path == "prefect-served":
        assert served is not None
        env["PREFECT_API_URL"], env["PREFECT_HOME"] = served[0], str(served[1])
    if path == "prefect-background":  # the first run starts one (cli/local_server.py)
        env.pop("ENGAGE_SYNC_PREFECT_SERVER")
        env["PREFECT_HOME"] = str(workdir / "prefect-background")
    cmd = [str(BIN / "engage-sync"), "run", str(integration)]
    if path == "no-prefect":
        cmd.append("--no-prefect")
    if path == "dlt":  # the same load written with dlt, in its own environment
        assert dlt is not None
        cmd = [dlt[0], str(Path(__file__).with_name("dlt_track.py")), "--warehouse",
               str(dlt[1]), "--base-url", base_url, "--workdir", str(run_dir / "dlt")]
    if profile is not None:
        cmd = [str(BIN / "py-spy"), "record", "--format", "raw", "--rate", "50", "--threads",
               "--output", str(profile), "--", *cmd]
    httpx.post(f"{base_url}/_sandbox/reset", timeout=30).raise_for_status()
    if phase is not None:
        time.sleep((phase - time.time()) % WINDOW)
    started, started_wall = time.perf_counter(), time.time()
    cpu_before, sink_before = _children_cpu(), _process_cpu(sink_pid)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = TreeRss(proc.pid)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    cpu = _children_cpu() - cpu_before
    sink_cpu = _process_cpu(sink_pid) - sink_before
    sampler.done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    counters = httpx.get(f"{base_url}/_sandbox/counters", timeout=30).json()
    timeline = request_timeline(base_url, started_wall, wall)
    shutil.rmtree(run_dir, ignore_errors=True)
    record = _last_json(out)
    return {"path": name, "wall_s": wall, "rows": record["rows_read"],
            "rows_per_s": record["rows_read"] / wall,
            "peak_rss_mb": {k: round(v, 1) for k, v in sampler.peaks.items()},
            "peak_rss_sum_mb": round(sampler.peak_sum, 1),
            "requests": counters.get("requests", {}).get("/users/track", counters.get(
                "requests_total")), "stderr_lines": len(err.splitlines()),
            "job_status": record["job_status"],
            # what the CPU pin did (kept, moved, let go): a run that lost its CPU is slower
            "pin_log": [line.split("engage_sync.", 1)[-1][:160] for line in err.decode(
                errors="replace").splitlines() if "CPU" in line][-4:],
            # a first diffed run's end: the helper's write of the field record (diff/stage.py)
            "helper_s": [float(line.rsplit(" in ", 1)[1].split()[0]) for line in err.decode(
                errors="replace").splitlines() if "the helper wrote the field record" in line],
            # the command's processes, each waited for by its parent (the CLI, a field helper,
            # a temporary Prefect server; py-spy too when profiling): user + system seconds
            "cpu_s": round(cpu, 1), "cpu_s_per_million_rows": round(
                cpu * 1e6 / max(record["rows_read"], 1), 1),
            # the sandbox's own seconds: on a small machine the sink shares the cores
            "sink_cpu_s": round(sink_cpu, 1),
            # the CLI's own threads, by name (/proc/PID/task; a thread that ended after the
            # last 50 ms sample is counted as last seen)
            "thread_cpu_s": sampler.thread_cpu(), "timeline_s": timeline,
            "start_phase_s": None if phase is None else round(started_wall % WINDOW, 3)}


def request_timeline(base_url: str, started: float, wall: float) -> dict[str, float]:
    """When the sandbox received the run's first and last /users/track requests, in seconds
    from the command's start (epoch `started`), and the command's time after the last: the
    span between is what the service's limit sets, the rest is the command's own."""
    log = httpx.get(f"{base_url}/_sandbox/requests", params={"path": "/users/track"},
                    timeout=60).json()["requests"]
    times = [entry["received_at"] - started for entry in log]
    if not times:
        return {}
    first, last = min(times), max(times)
    return {"first": round(first, 2), "last": round(last, 2),
            "after_last": round(wall - last, 2)}


def empty_database(url: str) -> None:
    """Every table of the PostgreSQL database at `url` dropped (a first run's state)."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        engine.dispose()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int | None) -> float:
    """User + system seconds of a running process, from Linux's /proc (0 for no process)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _last_json(out: bytes) -> dict[str, Any]:
    """The status record the command printed (the JSON document at the end of stdout)."""
    text = out.decode()
    start = text.rfind("\n{") + 1  # py-spy may print after it
    try:
        return dict(json.JSONDecoder().raw_decode(text, start)[0])
    except json.JSONDecodeError:
        raise SystemExit(f"no status record on stdout:\n{text[-2000:]}") from None


def breakdown(profile: Path) -> dict[str, float]:
    """Share of the CLI's samples per stage, all threads; a thread blocked on a socket read, a
    lock or a pool slot counts as `waiting`, not as its stage."""
    counts: collections.Counter[str] = collections.Counter()
    for line in profile.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        stage = "waiting" if any(w in leaf for w in WAITS) else next(
            (name for name, marks in STAGES if any(m in stack for m in marks)), "other")
        counts[stage] += int(n)
    total = sum(counts.values()) or 1
    return {stage: round(100 * n / total, 1) for stage, n in counts.most_common()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--kind", choices=("attributes", "events"), default="attributes")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--paths", default="prefect,no-prefect")
    p.add_argument("--no-rate-limits", action="store_true")
    p.add_argument("--diff", choices=("off", "fields"),
                   help="attributes: the field diff (default: the integration default, fields)")
    p.add_argument("--profile", action="store_true", help="py-spy the last run of each path")
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-user-bench"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--warehouse-query", default="", metavar="?KEY=VALUE",
                   help="options on the DuckDB URL, e.g. ?memory_limit=96MB")
    p.add_argument("--mapped", action="store_true",
                   help="attributes through mapping: (later rows counted), not the sync format")
    p.add_argument("--max-in-flight", type=int, default=None,
                   help="service.max_in_flight of the integration (default: the product's)")
    p.add_argument("--before", metavar="REVISION",
                   help="the code a path ending in @before runs (git archive of REVISION)")
    p.add_argument("--neighbours", type=int, default=0,
                   help="busy processes (a Python loop each, on any CPU) beside every run")
    p.add_argument("--state", choices=("sqlite", "postgres"), default="sqlite",
                   help="the state database: a SQLite file (the default) or a local "
                        "PostgreSQL server that syncs its commits to disk, as in production")
    p.add_argument("--dlt-python", default=".dlt-venv/bin/python",
                   help="the `dlt` path's interpreter, with dlt installed (see dlt_track.py)")
    args = p.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    warehouse = workdir / f"{args.kind}-{args.rows}.duckdb"
    if args.kind == "events":
        if not warehouse.exists():
            build_events(warehouse, args.rows)
    elif warehouse_rows(warehouse) != args.rows:
        build_warehouse(warehouse, args.rows)
    port = free_port()
    sandbox = start_sandbox(port, not args.no_rate_limits, workdir / "sandbox.log")
    base_url = f"http://127.0.0.1:{port}"
    integration = write_integration(workdir, warehouse, base_url, args.kind, args.diff,
                                    args.max_in_flight, args.warehouse_query, args.mapped)
    paths = args.paths.split(",")
    before = code_of(args.before, workdir) if args.before else None
    for tree in (Path(__file__).resolve().parents[1] / "src", before):  # as an install has it
        if tree is not None:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True,
                           env={k: v for k, v in os.environ.items()
                                if k != "PYTHONDONTWRITEBYTECODE"})
    results: list[dict[str, Any]] = []
    server, served = None, None
    pg = PostgresServer(durable=True) if args.state == "postgres" else None
    if pg is not None:
        pg.start()
    if any(base_path(p) == "prefect-served" for p in paths):
        home = Path(tempfile.mkdtemp(dir=workdir, prefix="prefect-served-"))
        server, api = start_prefect_server(home)
        served = (api, home)  # a deployment's server has answered before: its first
        httpx.get(f"{api}/admin/version", timeout=30)  # answer is 0.5 s slower
    neighbours = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                  for _ in range(args.neighbours)]
    try:
        for k in range(args.runs):
            phase = None if args.no_rate_limits else (k + 0.5) * WINDOW / args.runs
            for path in paths:
                prof = workdir / f"{path}.prof.txt" if args.profile and k == args.runs - 1 \
                    else None
                r = one_run(path, integration, workdir, base_url, prof, served,
                            (args.dlt_python, warehouse), pg.url if pg is not None else None,
                            sandbox.pid, before, phase)
                if prof is not None:
                    r["breakdown_pct"] = breakdown(prof)
                results.append(r)
                print(json.dumps(r), flush=True)
    finally:
        for busy in neighbours:
            busy.kill()
        stop(sandbox)
        if pg is not None:
            pg.remove()
        if server is not None:
            stop_server(server)
        if any(base_path(p) == "prefect-background" for p in paths):
            subprocess.run([str(BIN / "prefect"), "server", "stop"], capture_output=True,
                           env={**os.environ, "PREFECT_HOME": str(workdir / "prefect-background")})
    minimum = math.ceil(args.rows / OBJECTS_PER_REQUEST)
    for path in paths:
        rs = [r for r in results if r["path"] == path]
        print(f"{path}: median of {len(rs)}: {statistics.median(r['rows_per_s'] for r in rs):,.0f}"
              f" rows/s, wall {statistics.median(r['wall_s'] for r in rs):.1f} s, peak RSS sum "
              f"{statistics.median(r['peak_rss_sum_mb'] for r in rs):.0f} MB "
              f"({rs[-1]['peak_rss_mb']}), CPU {statistics.median(r['cpu_s'] for r in rs):.1f} s "
              f"(the sink's {statistics.median(r['sink_cpu_s'] for r in rs):.1f} s), "
              f"requests {rs[-1]['requests']} vs minimum {minimum}")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
