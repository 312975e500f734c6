"""Partitioned runs as Prefect task runs on a Dask `LocalCluster` of 2 worker processes, against
a real Prefect server, the sandbox as its own process with a tight /users/track limit, and a
Redis rate budget every worker shares.

- attributes and events in 4 partitions: every row delivered, every event once, and at most
  one request over the limit in any window at the sandbox, 429s included (at most one 429
  answered);
- a worker process SIGKILLed mid-run: Dask runs its partitions again on the other worker (or
  the next start resumes them); nothing is lost, events sent twice are counted, and every
  row counted as possibly doubled is listed by `engage-sync errors events` with its
  partition;
- the flow builds the runner the config names (threads, a LocalCluster, an address), and runs
  partitions on Prefect's thread pool when none is named.
Rows: ENGAGE_SYNC_DASK_ROWS (default 20,000 per kind, always run); 100,000 per kind is the
200,000-row run (about a minute), run with ENGAGE_SYNC_BIG=1.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml

from engage_sandbox.state.settings import RateLimit, SandboxSettings
from engage_sandbox.web.server import SandboxHandle, run_sandbox
from engage_sync.adapters.wiring import open_state
from engage_sync.config.files import load_integration
from tests.integration.conftest import (
    ROOT,
    T0,
    Service,
    write_integration,
)
from tests.integration.errors_listing import listed
from tests.redis_server import RedisServer

LIMIT = 100  # /users/track requests per 1-second window at this sandbox: 7,500 objects/s
# The integrations' own limit, a tenth under the sandbox's: the shared budget keeps the grants of
# every 1 s span within it, but the sandbox counts a request when it arrives, and on 2 shared
# cores (Dask workers, the coordinator, Prefect's server, Redis, the sandbox and another test)
# a request granted near a window's end can arrive tens of ms later, in the next window (3
# requests of 2,674 were answered 429 in one CI run at the full limit). Private budgets would
# still send 2 x 90 a second: far over.
BUDGET = 90
TRACK = "/users/track"


@pytest.fixture(scope="module")
def tight_sandbox() -> Iterator[SandboxHandle]:
    settings = SandboxSettings(seed=ROOT / "config" / "sandbox-seed.yaml",
                               rate_limits={"users_track": RateLimit(LIMIT, 1)})
    with run_sandbox(settings=settings, in_process=False) as handle:
        yield handle


@pytest.fixture
def tight(tight_sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch,
          redis: RedisServer) -> Iterator[Service]:
    tight_sandbox.reset()
    monkeypatch.setenv("ENGAGE_API_KEY", tight_sandbox.api_key)
    monkeypatch.setenv("BUDGET_URL", redis.url)
    with httpx.Client(base_url=tight_sandbox.control_url, timeout=60) as control:
        yield Service(tight_sandbox.base_url, control)


def build(tmp_path: Path, svc: Service, rows: int, users: int) -> tuple[Path, Path]:
    """A DuckDB warehouse of `rows` attribute rows (one per user) and `rows` events over
    `users` users, built in DuckDB SQL; the two integration files, 4 partitions on Dask."""
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    engine = sa.create_engine(url)
    t0 = T0.isoformat(sep=" ")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE users_sync AS SELECT TIMESTAMP '" + t0 + "' + to_milliseconds(i) "
            "AS updated_at, 'u' || lpad(i::VARCHAR, 7, '0') AS external_id, "
            "'{\"plan\": \"free\", \"n\": ' || i || '}' AS payload "
            f"FROM range({rows}) t(i)")
        conn.exec_driver_sql(
            "CREATE TABLE events_sync AS SELECT 'e' || lpad(i::VARCHAR, 7, '0') AS event_id, "
            "TIMESTAMP '" + t0 + "' + to_milliseconds(i) AS updated_at, "
            f"'v' || lpad((i % {users})::VARCHAR, 7, '0') AS external_id, "
            "'{\"name\": \"viewed\", \"properties\": {\"eid\": \"e' || lpad(i::VARCHAR, 7, "
            f"'0') || '\"}}}}' AS payload FROM range({rows}) t(i)")
    engine.dispose()
    service = {"base_url": svc.base_url, "retry_deadline_seconds": 120,
               "rate_limit": {"requests": BUDGET, "per_seconds": 1},
               "rate_budget": {"backend": "redis", "url": "${BUDGET_URL}"}}
    runner = {"type": "dask", "n_workers": 2, "threads_per_worker": 2}
    common = {"warehouse": {"url": url}, "service": service, "partitions": 4,
              "task_runner": runner, "extract_batch_rows": 5000}
    users_path = write_integration(tmp_path, "users", {
        "kind": "attributes", "source": {"table": "users_sync"}, "diff": "off", **common})
    events_path = write_integration(tmp_path, "events", {
        "kind": "events", "source": {"table": "events_sync"}, "row_key": ["EVENT_ID"],
        **common})
    return users_path, events_path


def run_flow(path: Path, state_url: str, **env: str) -> subprocess.Popen[bytes]:
    """`engage-sync run` (a flow run on the session's Prefect server) as its own process: the
    coordinator, whose children are the LocalCluster's workers."""
    return subprocess.Popen(
        [sys.executable, "-m", "engage_sync.cli.main", "--log-level", "WARNING", "run",
         str(path),
         "--state-url", state_url], env={**os.environ, **env}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)


def finish(proc: subprocess.Popen[bytes], timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def track_log(svc: Service) -> list[dict[str, Any]]:
    return svc.requests(TRACK)


def most_in_a_window(entries: list[dict[str, Any]]) -> int:
    """The most requests that arrived in one of the sandbox's 1 s windows, 429s included."""
    return max(Counter(math.floor(e["received_at"]) for e in entries).values())


def users_delivered(svc: Service) -> int:
    return sum(1 for p in svc.profiles() if str(p.get("external_id", "")).startswith("u"))


ROWS = int(os.environ.get("ENGAGE_SYNC_DASK_ROWS", "20000"))


BIG = pytest.mark.skipif(os.environ.get("ENGAGE_SYNC_BIG") != "1", reason=(
    "the 200,000-row run takes 52-65 s here: ENGAGE_SYNC_BIG=1 runs it; the 40,000-row "
    "variant always runs"))


@pytest.mark.parametrize("rows", [
    ROWS, pytest.param(100_000, marks=[pytest.mark.slow, BIG], id="200k")])
def test_attributes_and_events_in_4_partitions_on_2_dask_workers_within_the_limit(
        prefect_api: str, tight: Service, tmp_path: Path, rows: int) -> None:
    users, events = build(tmp_path, tight, rows, users=rows // 10)
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    started = time.monotonic()
    records = []
    for path in (users, events):
        code, out, err = finish(run_flow(path, state_url))
        assert code == 0, err[-3000:]
        records.append(json.loads(out))
    seconds = time.monotonic() - started
    entries = track_log(tight)
    statuses = Counter(e["status"] for e in entries)
    print(f"{2 * rows} rows in {seconds:.1f} s ({2 * rows / seconds:.0f} rows/s), "
          f"{len(entries)} requests, most in a 1 s window: {most_in_a_window(entries)}, "
          f"statuses {dict(statuses)}")
    assert all(r["job_status"] == "success" and r["rows_synced"] == rows for r in records)
    assert most_in_a_window(entries) <= LIMIT + 1  # at most one request over the limit
    assert statuses.get(429, 0) <= 1
    ids = tight.event_ids()
    assert len(ids) == rows and len(set(ids)) == rows  # every event, once
    assert users_delivered(tight) == rows
    store = open_state(state_url)
    for path in (users, events):
        run = store.runs_newest_first(path.stem, 0, 1)[0]
        assert {r["integration"] for r in store.partition_runs(run["run_id"])} == {
            f"{path.stem}#{k}/4" for k in range(4)}
        assert store.cursor(path.stem) is not None
    store.engine.dispose()


def children_of(pid: int) -> list[int]:
    """The pids whose parent is `pid` (the LocalCluster's worker processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def worker_pids(coordinator: int) -> list[int]:
    return [p for p in children_of(coordinator)
            if b"spawn" in Path(f"/proc/{p}/cmdline").read_bytes()
            or b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]


def busiest(pids: list[int], over: float = 0.3) -> int:
    """The process that used the most CPU over the next `over` seconds: the worker running a
    partition now (one that finished its partitions early sits idle, and killing it would
    stop nothing)."""
    def ticks(pid: int) -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    before = {p: ticks(p) for p in pids}
    time.sleep(over)
    return max(pids, key=lambda p: ticks(p) - before[p])


@pytest.mark.parametrize("healed", [True, False], ids=["dask-reruns", "run-resumed"])
def test_a_dask_worker_killed_mid_run_loses_nothing_and_doubles_are_counted(
        prefect_api: str, tight: Service, tmp_path: Path, healed: bool,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`dask-reruns`: Dask runs the dead worker's partitions again on the other worker, where
    they resume. `run-resumed`: Dask gives up on them at once (allowed-failures 0): the other
    partitions finish, the run fails naming a partition, the cursor stays below every row the
    stopped partitions had not settled, and the next start resumes only those. Either way the
    requests the killed worker had in flight (the sandbox holds requests 5-40 a while, so it
    has some) are sent again, and each of their rows is listed under the integration as a
    `duplicate` of its partition."""
    rows = 12_000
    _, events = build(tmp_path, tight, rows, users=1000)
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    env = {} if healed else {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    tight.faults([{"path": TRACK, "action": "delay", "nth": list(range(5, 41)),
                   "delay_seconds": 4}])
    proc = run_flow(events, state_url, **env)
    deadline = time.monotonic() + 120
    # Kill early: 24 of 160 requests, while every partition (40 requests each) still has
    # rows to send, so the busiest worker holds unfinished partitions. Killed at 70, a worker
    # whose two partitions had just finished (its Prefect log shipping still busy) could be
    # chosen on a loaded machine, and the run then had nothing to lose.
    # 20 requests held (at most 8 in flight a partition): they are of 3 partitions or more,
    # so each worker (2 partitions at a time) has some in flight when one is killed
    while len(track_log(tight)) < 24:
        assert proc.poll() is None, finish(proc)[2][-3000:]
        assert time.monotonic() < deadline, "the run never started sending"
        time.sleep(0.1)
    workers = worker_pids(proc.pid)
    assert len(workers) == 2, workers
    os.kill(busiest(workers), signal.SIGKILL)
    tight.faults([])
    code, out, err = finish(proc)
    killed_run = json.loads(out) if code == 0 else None
    assert (killed_run is not None) == healed, err[-3000:]
    if killed_run is None:  # the partitions of the killed worker stopped: resume the run
        assert "partition" in err and "run it again to resume them" in err
        held_back(open_state(state_url), tight, rows)
        code, out, err = finish(run_flow(events, state_url))
        assert code == 0, err[-3000:]
    record = json.loads(out)
    sent = Counter(tight.event_ids())
    assert set(sent) == {f"e{i:07d}" for i in range(rows)}  # nothing lost
    doubled = sum(n - 1 for n in sent.values())
    assert doubled <= record["rows_possibly_duplicated"]  # every double counted
    assert record["rows_synced"] + record["rows_in_doubt"] + record[
        "rows_failed_with_errors"] >= rows
    assert record["rows_possibly_duplicated"] > 0  # the killed worker's requests in flight
    duplicates = [r for r in listed(state_url, "events", capsys) if r["kind"] == "duplicate"]
    assert len(duplicates) == record["rows_possibly_duplicated"]  # each listed, once
    assert {r["partition"] for r in duplicates} <= {f"{k}/4" for k in range(4)}
    assert {e for e, n in sent.items() if n > 1} <= {r["row_key"] for r in duplicates}
    store = open_state(state_url)
    runs = store.runs_newest_first("events", 0, 10)
    assert len(runs) == 1 and runs[0]["job_status"] in ("success", "partial")
    print(f"killed worker: rerun by Dask in the same run: {killed_run is not None}, "
          f"{doubled} events doubled, {record['rows_possibly_duplicated']} counted")
    store.engine.dispose()


def test_a_retry_warning_in_a_dask_worker_is_in_the_flow_runs_logs(
        prefect_api: str, tight: Service, tmp_path: Path) -> None:
    """A partition's request answered 500 is retried by a sending thread of a Dask worker's
    process: its warning reaches the flow run's logs on the server, under the partition's task
    run (before, it went to the worker's standard error only). Only this run's logs count:
    the session's server holds other tests' retry warnings."""
    users, _ = build(tmp_path, tight, 2000, users=200)
    tight.faults([{"path": TRACK, "action": "500", "nth": [1]}])
    since = datetime.now(UTC).isoformat()
    code, out, err = finish(run_flow(users, f"sqlite:///{tmp_path / 'state.db'}"))
    assert code == 0, err[-3000:]
    assert json.loads(out)["rows_synced"] == 2000
    with httpx.Client(base_url=prefect_api, timeout=30) as api:
        logs = api.post("/logs/filter", json={
            "logs": {"level": {"ge_": 30}, "timestamp": {"after_": since}},
            "limit": 200, "sort": "TIMESTAMP_DESC"}).json()
        retried = [g for g in logs if "POST /users/track: 500" in g["message"]
                   and "retrying in" in g["message"]]
        assert len(retried) == 1, [g["message"] for g in logs]
        line = retried[0]
        assert line["name"].startswith("engage_sync.") and line["flow_run_id"]
        task_run = api.get(f"/task_runs/{line['task_run_id']}").json()
    assert task_run["name"].startswith("partition-") and task_run["flow_run_id"] == line[
        "flow_run_id"]


def held_back(store: Any, svc: Service, rows: int) -> None:
    """After the stopped run: some partitions finished, some did not; the cursor (if it moved)
    is below every event not delivered, and no partition's progress passed one of its own."""
    run = store.runs_newest_first("events", 0, 1)[0]
    assert run["job_status"] == "running"  # resumable
    children = store.partition_runs(run["run_id"])
    finished = [c for c in children if c["job_status"] == "success"]
    assert 0 < len(finished) < 4  # a killed partition is `running`, or never began
    sent = set(svc.event_ids())
    missing = sorted(i for i in range(rows) if f"e{i:07d}" not in sent)
    assert missing  # the stopped partitions left rows unsent
    cursor = store.cursor("events")
    print(f"stopped run: cursor {cursor}, first event not sent e{missing[0]:07d}, "
          f"{len(missing)} not sent")
    if cursor is not None:  # positions are (updated_at = T0 + i ms, event_id)
        assert cursor[1] < f"e{missing[0]:07d}"
    store.engine.dispose()


def test_the_flow_builds_the_runner_the_config_names(tmp_path: Path) -> None:
    """The arguments prefect-dask and distributed must keep accepting (the pins' guard)."""
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from engage_sync.adapters.task_runners import task_runner

    def integration(runner: dict[str, Any]) -> Any:
        return load_integration(write_integration(tmp_path, "users", {
            "kind": "attributes", "source": {"table": "t"}, "partitions": 4,
            "task_runner": runner,
            "service": {"rate_budget": {"backend": "redis", "url": "redis://127.0.0.1:1"}}}))

    assert isinstance(task_runner(integration({}), 4), ThreadPoolTaskRunner)
    local = task_runner(integration({"type": "dask", "n_workers": 3}), 4)
    assert isinstance(local, DaskTaskRunner)
    assert local.cluster_kwargs == {"n_workers": 3, "threads_per_worker": 2,
                                    "processes": True, "dashboard_address": None}
    remote = task_runner(integration({"type": "dask", "address": "tcp://127.0.0.1:8786"}), 4)
    assert isinstance(remote, DaskTaskRunner) and remote.address == "tcp://127.0.0.1:8786"


def test_the_flow_runs_partitions_on_prefects_thread_pool_by_default(
        prefect_api: str, tight: Service, tmp_path: Path) -> None:
    """`task_runner` not set: the partitions are task runs in the flow's process, sharing its
    (local) rate budget."""
    from engage_sync.adapters.flows import sync_integration

    rows = 3000
    users, _ = build(tmp_path, tight, rows, users=300)
    path = write_integration(tmp_path, "threads", {
        **{k: v for k, v in yaml.safe_load(users.read_text()).items()
           if k not in ("task_runner", "service")},
        "service": {"base_url": tight.base_url, "rate_limit": {"requests": LIMIT,
                                                               "per_seconds": 1}}})
    record = asyncio.run(sync_integration(str(path), partitions=3,
                                          state_url=f"sqlite:///{tmp_path / 'state.db'}"))
    assert record["job_status"] == "success" and record["rows_synced"] == rows
    assert users_delivered(tight) == rows
    entries = track_log(tight)
    assert most_in_a_window(entries) <= LIMIT + 1 and all(e["status"] == 201 for e in entries)
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    assert len(store.partition_runs(record["run_id"])) == 3
    store.engine.dispose()


def test_the_workers_of_a_local_cluster_run_without_the_profiler() -> None:
    """Dask's profiler samples `sys._current_frames()` every 10 ms; on CPython 3.11 a garbage
    collection inside that call can deadlock a worker (every thread waiting for the GIL): it
    hung a partitioned run now and then. The workers a run starts get it turned off."""
    import dask
    from distributed import Client, LocalCluster

    from engage_sync.adapters.task_runners import without_profiler

    with dask.config.set({"distributed.worker.profile.enabled": True}):
        without_profiler()
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            enabled = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
    assert list(enabled.values()) == [False]
