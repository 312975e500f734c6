"""Load checks: many integrations in one folder, many clients of the status
server, and a long run killed along the way. Each subcommand starts what it needs on 127.0.0.1
(a PostgreSQL server, a Prefect server, the lean sandbox with the service's real rate limits,
`engage-sync status-server`), prints a small table and, with --json, the figures as JSON; it
exits non-zero when a check fails.

    python benchmarks/load_checks.py folder --integrations 200 [--rows 200]
    python benchmarks/load_checks.py status --clients 50 [--integrations 50 --runs 40]
        [--requests 40]
    python benchmarks/load_checks.py kills --rows 10000000 --kills 5 [--keep-warehouse]

`folder`: a DuckDB warehouse of N small tables, N integration files in one folder, the state
database on a PostgreSQL server; `deployments/serve.py --per-folder` serves the folder's one
deployment (`engage-sync-folder/<folder>`, the `sync_folder` flow) to a Prefect server, and one
flow run of it is created as `prefect deployment run` does. Reports the wall time from the flow
run's creation to its end, the peak RSS of the serving process tree (serve.py and the flow run's
process), the most connections to the state database seen at once (pg_stat_activity polled
every 100 ms), and checks every integration's newest record: success, every row synced.

`status`: a state database on PostgreSQL holding M integrations of R finished runs each, their
files in a config folder; `engage-sync status-server` as its own process; C client threads
(one keep-alive httpx client each) start together and each makes a fixed number of requests:
walks of job_sync_status of one integration after another, following the Link header's next
to the last page, and every third walk one of GET /cdi/integrations. Reports p50 / p99 / max
latency, requests/s and the failures (any answer that is not 200 with the expected page).

`kills`: a DuckDB warehouse of N attribute rows (`pipeline_throughput.build_warehouse`),
`engage-sync run FILE --no-prefect` (SQLite state file) against the lean sandbox, SIGKILLed
(its process group: the run and its field helper, as a container is killed) K times, when the
sandbox has received 1/(K+1), 2/(K+1), ... of N objects (and at least one more than when the
attempt started) plus a random delay under a second,
restarted at once each time, then run to its end. Reports the wall time, the peak RSS of each
attempt's process tree, and "nothing lost": the sandbox received at least N objects, every run
record adds up (synced + failed + rejected + in doubt + unchanged; their sum over the runs is
the warehouse's N; each run's synced / failed / in doubt equal its journal's sums, nothing
pending), and the final cursor is the warehouse's last row.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline_throughput import (
    API_KEY,
    OBJECTS_PER_REQUEST,
    TABLE,
    build_warehouse,
    free_port,
    start_sandbox,
    stop,
    warehouse_rows,
)
from user_command import TreeRss, _last_json, _process_cpu

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STATE_DB = "engage_state"
TOKEN = "load-check-token-0123456789abcdef"  # the status server's bearer token, this check's


class RoleRss(TreeRss):
    """TreeRss with each process named by its role: the root (`root_name`), a flow run's
    process (multiprocessing spawn), the field helper, multiprocessing's resource tracker."""

    def __init__(self, pid: int, root_name: str) -> None:
        super().__init__(pid)
        self.root_name = root_name
        self.timeline: list[tuple[float, float]] = []  # (seconds, sum of the tree's RSS, MB)

    def run(self) -> None:
        from user_command import _rss_mb

        t0 = time.monotonic()
        while not self.done.is_set():
            total = 0.0
            for pid, name in self._tree():
                rss = _rss_mb(pid)
                total += rss
                self.peaks[name] = max(self.peaks.get(name, 0.0), rss)
            self.peak_sum = max(self.peak_sum, total)
            self.timeline.append((time.monotonic() - t0, total))
            self.done.wait(0.05)

    def at(self, *shares: float) -> list[float]:
        """The tree's RSS (MB) at these shares of the sampled span."""
        if not self.timeline:
            return []
        end = self.timeline[-1][0]
        return [round(next((mb for t, mb in self.timeline if t >= s * end),
                           self.timeline[-1][1]), 1) for s in shares]

    def _tree(self) -> list[tuple[int, str]]:
        named = []
        for pid, _ in super()._tree():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                cmd = ""
            if not cmd and pid != self.pid:
                continue  # exited, not yet reaped
            if pid == self.pid:
                name = self.root_name
            elif "diff.helper" in cmd:
                name = "field helper"
            elif "resource_tracker" in cmd:
                name = "resource tracker"
            elif "spawn_main" in cmd or "prefect" in cmd:
                name = "flow run process"
            else:
                name = f"{Path(cmd.split(' ', 1)[0]).name} {pid}"
            named.append((pid, name))
        return named


def _table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
            "python": sys.version.split()[0]}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# --- PostgreSQL --------------------------------------------------------------------------------

def start_postgres() -> Any:
    """A throwaway PostgreSQL server on 127.0.0.1 (tests/pg_server.py) with a database of its
    own for the state, so pg_stat_activity counts only the state's connections."""
    import psycopg

    from tests.pg_server import PostgresServer

    server = PostgresServer()
    server.start()
    with psycopg.connect(_dsn(server, "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {STATE_DB}")
    return server


def _dsn(server: Any, database: str) -> str:
    return f"host=127.0.0.1 port={server.port} user=postgres dbname={database}"


def state_url(server: Any) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/{STATE_DB}"


class ConnectionPoller(threading.Thread):
    """Counts the state database's backends in pg_stat_activity every `every` seconds (from a
    connection to another database, so the poller is not among them); keeps the most seen."""

    def __init__(self, server: Any, every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.server, self.every = server, every
        self.done = threading.Event()
        self.samples: list[int] = []
        self.most, self.most_by_app = 0, {}  # type: ignore[var-annotated]

    def run(self) -> None:
        import psycopg

        with psycopg.connect(_dsn(self.server, "postgres"), autocommit=True) as conn:
            while not self.done.is_set():
                rows = conn.execute(
                    "SELECT coalesce(application_name, ''), state, count(*) FROM "
                    "pg_stat_activity WHERE datname = %s GROUP BY 1, 2", [STATE_DB]).fetchall()
                total = sum(n for _, _, n in rows)
                self.samples.append(total)
                if total > self.most:
                    self.most = total
                    self.most_by_app = {f"{app or '-'}/{state}": n for app, state, n in rows}
                self.done.wait(self.every)

    def stop(self) -> None:
        self.done.set()
        self.join()


# --- folder ------------------------------------------------------------------------------------

def build_folder_warehouse(path: Path, tables: int, rows: int) -> None:
    """`tables` tables T0000... of `rows` attribute rows each (service sync format), their users
    distinct across tables."""
    import duckdb

    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    try:
        for t in range(tables):
            con.execute(f"""
                CREATE TABLE T{t:04d} AS
                SELECT TIMESTAMP '2024-01-01 00:00:00' + to_microseconds(i * 1000000)
                           AS UPDATED_AT,
                       'u{t:04d}-' || lpad(i::VARCHAR, 6, '0') AS EXTERNAL_ID,
                       json_object('plan', CASE i % 3 WHEN 0 THEN 'gold' WHEN 1 THEN 'silver'
                                           ELSE 'free' END,
                                   'score', i % 1000, 'table', {t}) AS PAYLOAD
                FROM range(?) r(i)""", [rows])
        con.execute("CHECKPOINT")
    finally:
        con.close()


def write_folder(folder: Path, warehouse: Path, base_url: str, tables: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for t in range(tables):
        name = f"i{t:04d}"
        (folder / f"{name}.yaml").write_text(
            "kind: attributes\n"
            f"warehouse:\n  url: duckdb:///{warehouse}\n"
            f"source:\n  table: T{t:04d}\n"
            "payload:\n  identifier: external_id\n"
            f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\n"
            "settle_lag: 0s\n", "utf-8")
        names.append(name)
    return names


def cmd_folder(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="load-folder-", dir=args.workdir))
    home = workdir / "prefect"
    home.mkdir()
    warehouse = workdir / "warehouse.duckdb"
    started = time.perf_counter()
    build_folder_warehouse(warehouse, args.integrations, args.rows)
    print(f"warehouse: {args.integrations} tables x {args.rows} rows in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    folder = workdir / "folder"
    names = write_folder(folder, warehouse, base_url, args.integrations)
    sandbox = start_sandbox(port, True, workdir / "sandbox.log")
    pg = start_postgres()
    url = state_url(pg)
    from tests.prefect.conftest import _stop as stop_group
    from tests.prefect.conftest import start_prefect_server, start_serve, wait_for_deployments

    server, api = start_prefect_server(home)
    os.environ.update({"PREFECT_API_URL": api, "PREFECT_HOME": str(home),
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"})
    serve = None
    try:
        log = workdir / "serve.log"
        serve = start_serve(folder, url, api, API_KEY, log, "--per-folder")
        deployment = f"engage-sync-folder/{folder.name}"
        wait_for_deployments(serve, log, deployment)
        print(f"serving {deployment} (deployments/serve.py --per-folder) to the Prefect server "
              f"at {api}; state on PostgreSQL 127.0.0.1:{pg.port}/{STATE_DB}", flush=True)
        from prefect.deployments import run_deployment

        poller, rss = ConnectionPoller(pg), RoleRss(serve.pid, "serve.py")
        poller.start()
        rss.start()
        t0 = time.perf_counter()
        run = run_deployment(deployment, timeout=args.timeout, poll_interval=1,
                             as_subflow=False)
        wall = time.perf_counter() - t0
        poller.stop()
        rss.done.set()
        rss.join()
        state = run.state
        flow_state = f"{state.type.value if state else '?'}"
        message = (state.message or "") if state else ""
        run_time = run.total_run_time.total_seconds() if run.total_run_time else None
        counters = httpx.get(f"{base_url}/_sandbox/counters", timeout=30).json()
    finally:
        if serve is not None:
            stop_group(serve)
        stop_group(server)
        stop(sandbox)
    try:
        from engage_sync.adapters.wiring import open_state

        store = open_state(url)
        bad, statuses = [], {}
        for name in names:
            newest = store.runs_newest_first(name, 0, 1)
            rec = newest[0] if newest else {}
            statuses[rec.get("job_status", "none")] = statuses.get(rec.get("job_status",
                                                                           "none"), 0) + 1
            if rec.get("job_status") != "success" or rec.get("rows_synced") != args.rows:
                bad.append((name, rec.get("job_status"), rec.get("rows_synced"),
                            rec.get("message")))
        store.engine.dispose()
    finally:
        pg.remove()
    result = {
        "check": "folder", "integrations": args.integrations, "rows_each": args.rows,
        "flow_run_state": flow_state, "flow_run_message": message[:500],
        "wall_s": round(wall, 1), "flow_total_run_time_s": run_time,
        "peak_rss_mb_by_process": {k: round(v, 1) for k, v in rss.peaks.items()},
        "peak_rss_sum_mb": round(rss.peak_sum, 1),
        "rss_sum_mb_at_10_25_50_75_95": rss.at(0.1, 0.25, 0.5, 0.75, 0.95),
        "state_connections_max": poller.most, "state_connections_at_max": poller.most_by_app,
        "state_connections_median": statistics.median(poller.samples) if poller.samples else 0,
        "connection_samples": len(poller.samples),
        "records_by_status": statuses, "records_not_whole": bad[:10],
        "records_not_whole_count": len(bad),
        "sandbox_attributes_processed": counters["attributes_processed"],
        "sandbox_requests": counters["requests"],
        "machine": _machine(),
    }
    result["ok"] = (flow_state == "COMPLETED" and not bad
                    and counters["attributes_processed"] >= args.integrations * args.rows)
    print(f"\nfolder: {args.integrations} integrations x {args.rows} rows, one flow run of "
          "a served deployment")
    _table([
        ("flow run", f"{flow_state} {message[:120]}"),
        ("wall (created to final state)", f"{wall:.1f} s ({wall / args.integrations:.2f} s "
                                          "an integration)"),
        ("flow run time (Prefect)", f"{run_time:.1f} s" if run_time else "-"),
        ("peak RSS, sum of the tree", f"{rss.peak_sum:.0f} MB"),
        ("peak RSS by process", ", ".join(f"{k} {v:.0f} MB" for k, v in rss.peaks.items())),
        ("RSS of the tree at 10/25/50/75/95 %", f"{rss.at(0.1, 0.25, 0.5, 0.75, 0.95)} MB"),
        ("state DB connections, most at once",
         f"{poller.most} ({poller.most_by_app}); median {result['state_connections_median']}, "
         f"{len(poller.samples)} samples"),
        ("records", f"{statuses}; not success with every row synced: {len(bad)}"),
        ("sandbox received", f"{counters['attributes_processed']:,} objects for "
                             f"{args.integrations * args.rows:,} rows, requests "
                             f"{counters['requests']}"),
    ])
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


# --- status ------------------------------------------------------------------------------------

def fill_state(url: str, integrations: int, runs_each: int, folder: Path) -> list[str]:
    """`integrations` names with `runs_each` finished runs each (counts varied), and a file
    each in `folder` so GET /cdi/integrations lists them."""
    import sqlalchemy as sa

    from engage_sync.adapters.wiring import open_state
    from engage_sync.state.schema import runs

    store = open_state(url)
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"i{k:03d}" for k in range(integrations)]
    rng = random.Random(24)
    for name in names:
        (folder / f"{name}.yaml").write_text(
            "kind: attributes\nwarehouse:\n  url: duckdb:///warehouse.duckdb\n"
            f"source:\n  table: {name}\npayload:\n  identifier: external_id\n"
            "service:\n  base_url: http://127.0.0.1:9\n  api_key_env: ENGAGE_API_KEY\n", "utf-8")
        for _ in range(runs_each):
            run_id = store.open_run(name, "incremental", None, None)
            status = rng.choice(["success"] * 8 + ["partial", "error"])
            store.finish_run(run_id, status)
            with store.engine.begin() as conn:
                conn.execute(runs.update().where(runs.c.run_id == run_id).values(
                    rows_synced=rng.randint(0, 10**6), rows_rejected=rng.randint(0, 9),
                    data_points_sent=rng.randint(0, 10**6),
                    last_timestamp_synced="2024-01-01T00:00:00.000Z"))
    with store.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(runs)) == \
            integrations * runs_each
    store.engine.dispose()
    return names


class Client(threading.Thread):
    """One client: a keep-alive connection, `requests` requests, walks of pages by Link."""

    def __init__(self, k: int, base: str, names: list[str], requests: int, runs_each: int,
                 start: threading.Barrier) -> None:
        super().__init__(daemon=True)
        self.k, self.base, self.names, self.requests = k, base, names, requests
        self.runs_each, self.start_barrier = runs_each, start
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def get(self, client: httpx.Client, url: str) -> httpx.Response | None:
        t0 = time.perf_counter()
        try:
            response = client.get(url)
        except httpx.HTTPError as exc:
            self.latencies.append(time.perf_counter() - t0)
            self.failures.append(f"{url}: {type(exc).__name__}: {exc}")
            return None
        self.latencies.append(time.perf_counter() - t0)
        if response.status_code != 200 or response.json().get("message") != "success":
            self.failures.append(f"{url}: {response.status_code} {response.text[:200]}")
            return None
        return response

    def walk(self, client: httpx.Client, first: str, expected: int) -> None:
        """Follow next from `first` while requests are left; a whole walk must see `expected`
        records."""
        url: str | None = first
        seen = 0
        while url and len(self.latencies) < self.requests:
            response = self.get(client, url)
            if response is None:
                return
            seen += len(response.json()["results"])
            url = response.links.get("next", {}).get("url")
        if url is None and seen != expected:
            self.failures.append(f"{first}: walked {seen} records, expected {expected}")

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=self.base, headers=headers, timeout=60) as client:
            self.start_barrier.wait()
            walk = 0
            while len(self.latencies) < self.requests:
                if walk % 3 == 2:
                    self.walk(client, "/cdi/integrations", len(self.names))
                else:
                    name = self.names[(self.k + walk) % len(self.names)]
                    self.walk(client, f"/cdi/integrations/{name}/job_sync_status",
                              self.runs_each)
                walk += 1


def cmd_status(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="load-status-", dir=args.workdir))
    pg = start_postgres()
    url = state_url(pg)
    server = None
    try:
        t0 = time.perf_counter()
        names = fill_state(url, args.integrations, args.runs, workdir / "config")
        print(f"state: {args.integrations} integrations x {args.runs} runs on PostgreSQL in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        port = free_port()
        env = {**os.environ, "ENGAGE_SYNC_STATUS_TOKEN": TOKEN}
        log = workdir / "status-server.log"
        server = subprocess.Popen(
            [str(BIN / "engage-sync"), "status-server", "--host", "127.0.0.1", "--port",
             str(port), "--config-dir", str(workdir / "config"), "--state-url", url],
            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/cdi/integrations", server, log,
                   {"Authorization": f"Bearer {TOKEN}"})
        rss = RoleRss(server.pid, "status-server")
        rss.start()
        poller = ConnectionPoller(pg)
        poller.start()
        cpu0 = _process_cpu(server.pid)
        barrier = threading.Barrier(args.clients + 1)
        clients = [Client(k, base, names, args.requests, args.runs, barrier)
                   for k in range(args.clients)]
        for c in clients:
            c.start()
        barrier.wait()
        t0 = time.perf_counter()
        for c in clients:
            c.join()
        wall = time.perf_counter() - t0
        server_cpu = _process_cpu(server.pid) - cpu0
        poller.stop()
        rss.done.set()
        rss.join()
    finally:
        if server is not None:
            stop(server)  # type: ignore[arg-type]
        pg.remove()
    latencies = [x for c in clients for x in c.latencies]
    failures = [f for c in clients for f in c.failures]
    ms = [x * 1000 for x in latencies]
    result = {
        "check": "status", "clients": args.clients, "integrations": args.integrations,
        "runs_each": args.runs, "requests": len(latencies),
        "p50_ms": round(_quantile(ms, 0.50), 1), "p99_ms": round(_quantile(ms, 0.99), 1),
        "max_ms": round(max(ms), 1), "mean_ms": round(statistics.fmean(ms), 1),
        "wall_s": round(wall, 2), "requests_per_s": round(len(latencies) / wall, 1),
        "failures": len(failures), "first_failures": failures[:5],
        "server_cpu_s": round(server_cpu, 1), "server_peak_rss_mb": round(rss.peak_sum, 1),
        "state_connections_max": poller.most, "machine": _machine(),
    }
    result["ok"] = not failures
    print(f"\nstatus: {args.clients} clients x {args.requests} requests, "
          f"{args.integrations} integrations x {args.runs} runs")
    _table([
        ("requests", f"{len(latencies):,} in {wall:.1f} s = {result['requests_per_s']:,} /s"),
        ("latency p50 / p99 / max", f"{result['p50_ms']} / {result['p99_ms']} / "
                                    f"{result['max_ms']} ms (mean {result['mean_ms']} ms)"),
        ("failed", f"{len(failures)} {failures[:2]}"),
        ("server", f"CPU {server_cpu:.1f} s over {wall:.1f} s, peak RSS {rss.peak_sum:.0f} MB, "
                   f"state DB connections at most {poller.most}"),
    ])
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path,
               headers: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: server exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer:\n{log.read_text()[-2000:]}")


# --- kills -------------------------------------------------------------------------------------

def _received(base_url: str) -> int:
    return int(httpx.get(f"{base_url}/_sandbox/counters", timeout=30).json()
               ["attributes_processed"])


def one_attempt(cmd: list[str], env: dict[str, str], log: Path,
                kill_when: Callable[[], bool] | None, timeout: float) -> dict[str, Any]:
    """One process of the run: started in its own process group, killed (the group, SIGKILL)
    when `kill_when()` first holds, else run to its end."""
    t0 = time.perf_counter()
    with log.open("ab") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True)
    rss = RoleRss(proc.pid, "engage-sync run")
    rss.start()
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()),  # type: ignore[union-attr]
                              daemon=True)
    reader.start()
    killed = False
    while proc.poll() is None:
        if time.perf_counter() - t0 > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise SystemExit(f"attempt ran over {timeout} s; killed")
        if kill_when is not None and kill_when():
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            proc.wait()
            break
        time.sleep(0.1)
    reader.join()
    with_children = True
    try:  # the field helper, if one outlived the group kill
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        with_children = False
    rss.done.set()
    rss.join()
    return {"wall_s": time.perf_counter() - t0, "rc": proc.returncode, "killed": killed,
            "peak_rss_sum_mb": round(rss.peak_sum, 1),
            "peak_rss_mb": {k: round(v, 1) for k, v in rss.peaks.items()},
            "stdout": b"".join(out), "group_left": with_children}


def run_state(db: Path, name: str) -> dict[str, Any]:
    """The newest run row of `name` in the SQLite state file, read between attempts."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text(
                "SELECT seq, job_status, rows_synced, rows_in_doubt, requests_sent FROM "
                "engage_runs WHERE integration = :n ORDER BY seq DESC LIMIT 1"),
                {"n": name}).mappings().first()
            return dict(row) if row else {}
    except sa.exc.OperationalError:
        return {}
    finally:
        engine.dispose()


def audit(db: Path, name: str, warehouse: Path, rows: int) -> dict[str, Any]:
    """Whether every run record adds up, against the journal, the row errors and the
    warehouse; and where the cursor stands against the warehouse's last row."""
    import duckdb
    import sqlalchemy as sa

    from engage_sync.adapters.wiring import open_state

    store = open_state(f"sqlite:///{db}")
    records = store.runs_newest_first(name, 0, 1000)
    problems, per_run = [], []
    total = 0
    with store.engine.connect() as conn:
        for r in records:
            read = (r["rows_synced"] + r["rows_failed_with_errors"] + r["rows_rejected"]
                    + r["rows_in_doubt"] + (r["rows_unchanged"] or 0))
            total += read
            j = conn.execute(sa.text(
                "SELECT coalesce(sum(synced), 0), coalesce(sum(failed), 0), "
                "coalesce(sum(in_doubt), 0), coalesce(sum(state = 'pending'), 0), count(*) "
                "FROM engage_journal WHERE run_id = :r"), {"r": r["run_id"]}).one()
            rejected = conn.scalar(sa.text(
                "SELECT count(*) FROM engage_row_errors WHERE run_id = :r AND kind = "
                "'rejected'"), {"r": r["run_id"]})
            entry = {"seq": r["seq"], "status": r["job_status"], "read": read,
                     "synced": r["rows_synced"], "failed": r["rows_failed_with_errors"],
                     "rejected": r["rows_rejected"], "in_doubt": r["rows_in_doubt"],
                     "unchanged": r["rows_unchanged"], "requests": r["requests_sent"],
                     "journal": {"synced": j[0], "failed": j[1], "in_doubt": j[2],
                                 "pending": j[3], "entries": j[4]},
                     "possibly_duplicated": r["rows_possibly_duplicated"]}
            per_run.append(entry)
            if (j[0], j[1], j[2], j[3]) != (r["rows_synced"], r["rows_failed_with_errors"],
                                            r["rows_in_doubt"], 0):
                problems.append(f"run {r['seq']}: record {entry} against journal {j}")
            if rejected != r["rows_rejected"]:
                problems.append(f"run {r['seq']}: {r['rows_rejected']} rejected, "
                                f"{rejected} reject records")
            if r["job_status"] != "success":
                problems.append(f"run {r['seq']}: {r['job_status']}: {r.get('message')}")
    if total != rows:
        problems.append(f"records add up to {total:,} rows read, the warehouse has {rows:,}")
    cursor = store.cursor(name)
    store.engine.dispose()
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        last = con.execute(f"SELECT UPDATED_AT, EXTERNAL_ID FROM {TABLE} "
                           "ORDER BY UPDATED_AT DESC, EXTERNAL_ID DESC LIMIT 1").fetchone()
    finally:
        con.close()
    assert last is not None
    text = json.dumps(list(cursor or []), default=str)
    at_last = last[1] in text and (last[0].isoformat(sep="T") in text
                                   or last[0].isoformat(sep=" ") in text)
    if not at_last:
        problems.append(f"cursor {text} is not at the last row {last}")
    return {"runs": per_run, "rows_read_sum": total, "cursor": text,
            "last_row": [str(last[0]), last[1]], "cursor_at_last_row": at_last,
            "problems": problems}


def cmd_kills(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    warehouse = workdir / f"kills-warehouse-{args.rows}.duckdb"
    if args.keep_warehouse and warehouse_rows(warehouse) == args.rows:
        print(f"warehouse: reusing {warehouse}", flush=True)
    else:
        took = build_warehouse(warehouse, args.rows)
        print(f"warehouse: {args.rows:,} rows built in {took:.1f} s", flush=True)
    run_dir = Path(tempfile.mkdtemp(prefix="load-kills-", dir=workdir))
    db = run_dir / "state.db"
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    name = "kills"
    integration = run_dir / f"{name}.yaml"
    integration.write_text(
        "kind: attributes\n"
        f"warehouse:\n  url: duckdb:///{warehouse}\n"
        f"source:\n  table: {TABLE}\n"
        "payload:\n  identifier: external_id\n"
        f"service:\n  base_url: {base_url}\n  api_key_env: ENGAGE_API_KEY\n"
        "settle_lag: 0s\n", "utf-8")
    sandbox = start_sandbox(port, True, run_dir / "sandbox.log")
    env = {**os.environ, "ENGAGE_API_KEY": API_KEY, "PREFECT_HOME": str(run_dir / "prefect")}
    cmd = [str(BIN / "engage-sync"), "run", str(integration), "--no-prefect", "--state-url",
           f"sqlite:///{db}"]
    rng = random.Random(args.seed)
    targets = [args.rows * (k + 1) // (args.kills + 1) for k in range(args.kills)]
    attempts: list[dict[str, Any]] = []
    log = run_dir / "run.log"
    t0 = time.perf_counter()
    try:
        for k in range(args.kills + 1):
            kill_when = None
            if k < args.kills:
                # and after this attempt sent something (a small run overshoots a target)
                target = max(targets[k], _received(base_url) + 1)
                delay = rng.uniform(0, 1.0)
                reached: list[float] = []

                def kill_when(target: int = target, delay: float = delay,
                              reached: list[float] = reached) -> bool:
                    if not reached and _received(base_url) >= target:
                        reached.append(time.perf_counter())
                    return bool(reached) and time.perf_counter() - reached[0] >= delay
            a = one_attempt(cmd, env, log, kill_when, args.attempt_timeout)
            a["received_after"] = _received(base_url)
            a["run_row_after"] = run_state(db, name)
            out = a.pop("stdout")
            if not a["killed"]:
                a["record"] = _last_json(out) if a["rc"] == 0 else None
            attempts.append(a)
            ended = "killed" if a["killed"] else f"exit {a['rc']}"
            print(f"attempt {k + 1}: {ended} after "
                  f"{a['wall_s']:.1f} s, peak RSS {a['peak_rss_sum_mb']:.0f} MB "
                  f"{a['peak_rss_mb']}, sandbox received {a['received_after']:,}, run row "
                  f"{a['run_row_after']}", flush=True)
            if not a["killed"]:
                break
        wall = time.perf_counter() - t0
        received = _received(base_url)
    finally:
        stop(sandbox)
    checks = audit(db, name, warehouse, args.rows)
    final = attempts[-1]
    kills_done = sum(a["killed"] for a in attempts)
    peaks = [a["peak_rss_sum_mb"] for a in attempts]
    full = [a["peak_rss_sum_mb"] for a in attempts if a["wall_s"] > 10]
    problems = list(checks["problems"])
    if received < args.rows:
        problems.append(f"the sandbox received {received:,} objects, fewer than {args.rows:,}")
    if final["killed"] or final["rc"] != 0:
        problems.append(f"the last attempt ended with {final['rc']}")
    if kills_done != args.kills:
        problems.append(f"{kills_done} kills, not {args.kills}: the run ended first")
    result = {
        "check": "kills", "rows": args.rows, "kills": kills_done, "wall_s": round(wall, 1),
        "rows_per_s": round(args.rows / wall), "attempts": attempts,
        "peak_rss_mb_min_max": [min(peaks), max(peaks)],
        "peak_rss_mb_attempts_over_10s_min_max": [min(full), max(full)] if full else None,
        "sandbox_received": received, "requests_min": math.ceil(args.rows / OBJECTS_PER_REQUEST),
        "audit": checks, "problems": problems, "ok": not problems, "machine": _machine(),
    }
    print(f"\nkills: {args.rows:,} rows, {kills_done} SIGKILLs, restarted each time")
    _table([
        ("wall (first start to the end)", f"{wall:.1f} s ({result['rows_per_s']:,} rows/s)"),
        ("peak RSS per attempt", " / ".join(f"{p:.0f}" for p in peaks) + " MB"),
        ("sandbox received", f"{received:,} objects for {args.rows:,} rows "
                             f"(+{received - args.rows:,})"),
        ("run records", "; ".join(
            f"run {r['seq']} {r['status']}: read {r['read']:,} = synced {r['synced']:,} + "
            f"failed {r['failed']} + rejected {r['rejected']} + in doubt {r['in_doubt']} + "
            f"unchanged {r['unchanged']}, {r['requests']:,} requests, journal pending "
            f"{r['journal']['pending']}" for r in checks["runs"])),
        ("cursor", f"{checks['cursor']} (last row {checks['last_row']}): "
                   f"{'at the last row' if checks['cursor_at_last_row'] else 'NOT at it'}"),
        ("problems", "none" if not problems else "; ".join(problems)),
    ])
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
        if not args.keep_warehouse:
            warehouse.unlink(missing_ok=True)
    return result


def main() -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-load"))
    common.add_argument("--json", action="store_true", help="print the figures as JSON too")
    common.add_argument("--keep", action="store_true", help="keep the work folder (logs, state)")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="check", required=True)
    f = sub.add_parser("folder", parents=[common],
                       help="N integrations of one folder, one served flow run")
    f.add_argument("--integrations", type=int, default=200)
    f.add_argument("--rows", type=int, default=200, help="rows of each integration's table")
    f.add_argument("--timeout", type=float, default=3600)
    s = sub.add_parser("status", parents=[common],
                       help="C concurrent clients paging the status server")
    s.add_argument("--clients", type=int, default=50)
    s.add_argument("--integrations", type=int, default=50)
    s.add_argument("--runs", type=int, default=40, help="finished runs of each integration")
    s.add_argument("--requests", type=int, default=40, help="requests of each client")
    k = sub.add_parser("kills", parents=[common],
                       help="a run of N rows SIGKILLed K times, restarted each time")
    k.add_argument("--rows", type=int, default=10_000_000)
    k.add_argument("--kills", type=int, default=5)
    k.add_argument("--seed", type=int, default=24, help="of the delays after each target")
    k.add_argument("--keep-warehouse", action="store_true")
    k.add_argument("--attempt-timeout", type=float, default=7200)
    args = p.parse_args()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    print(f"{args.check}: started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; "
          f"machine {_machine()}", flush=True)
    result = {"folder": cmd_folder, "status": cmd_status, "kills": cmd_kills}[args.check](args)
    result["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    if args.json:
        print(json.dumps(result, default=str))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
