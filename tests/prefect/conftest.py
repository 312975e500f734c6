"""A real Prefect server on loopback for the session, and `deployments/serve.py` serving a folder
of integrations (a DuckDB warehouse, the sandbox on loopback) to it.

The server runs as `prefect server start --host 127.0.0.1 --port <free>` with its own
PREFECT_HOME; this process talks to it through PREFECT_API_URL with heartbeats off (each
synchronous flow run would otherwise wait for its heartbeat thread at exit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from engage_sandbox.web.server import SandboxHandle
from engage_sync.adapters.wiring import open_state
from engage_sync.demo.main import free_port
from engage_sync.state.store import StateStore
from tests.integration.conftest import (  # noqa: F401  (the session sandbox fixture)
    T0,
    event_rows,
    sandbox,
    user_rows,
    write_integration,
)

ROOT = Path(__file__).resolve().parents[2]
PREFECT = Path(sys.executable).parent / "prefect"
USERS, EVENTS = 72, 144  # 3 days: a user an hour, an event every 30 minutes from T0


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer in {timeout} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started in its own session, and its children (`prefect server start`
    runs the server as a child process that a plain terminate() leaves behind)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
    with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
        os.killpg(proc.pid, signal.SIGKILL)


def start_prefect_server(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`prefect server start` on a free loopback port with its own PREFECT_HOME, telemetry off
    and the scheduler looping every 2 s; returns the process and its API URL once healthy."""
    port = free_port()
    log = home / "server.log"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "PREFECT_UI_ENABLED": "false",
           # scheduled runs within seconds (test_schedules), not the default minute
           "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2"}
    env.pop("PREFECT_API_URL", None)
    with log.open("wb") as out:
        proc = subprocess.Popen([str(PREFECT), "server", "start", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{port}/api"
    try:
        _wait(f"{api}/health", proc, log, "prefect server", 400)  # a loaded machine
    except BaseException:
        _stop(proc)
        raise
    return proc, api


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """PREFECT_API_URL of a Prefect server started for the session (about 5–10 s)."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        temporary_settings,
    )

    home = tmp_path_factory.mktemp("prefect-home")
    proc, api = start_prefect_server(home)
    saved = {k: os.environ.get(k) for k in ("PREFECT_API_URL", "PREFECT_HOME")}
    try:
        os.environ["PREFECT_API_URL"], os.environ["PREFECT_HOME"] = api, str(home)
        with temporary_settings(updates={PREFECT_API_URL: api,
                                         PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield api
    finally:
        from prefect.logging.handlers import APILogHandler

        APILogHandler().flush()  # send buffered run logs while the server still answers
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _stop(proc)


@dataclass
class Served:
    """The folder served by `deployments/serve.py`: its files, state and sandbox."""

    folder: Path
    state_url: str
    sandbox: SandboxHandle

    @property
    def state(self) -> StateStore:
        return open_state(self.state_url)

    def event_ids(self) -> list[str]:
        body = httpx.get(f"{self.sandbox.control_url}/profiles", timeout=30).json()
        profiles = body["profiles"] if isinstance(body, dict) else body
        return [e["properties"]["eid"] for p in profiles for e in p.get("events", [])
                if "eid" in (e.get("properties") or {})]


def build_folder(root: Path, base_url: str) -> Path:
    """A DuckDB warehouse (3 days of users and events, one invalid user row) and two
    integration files; the warehouse's connections are closed so served runs can open it."""
    url = f"duckdb:///{root / 'warehouse.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE users_sync (updated_at TIMESTAMP, external_id "
                             "VARCHAR, payload VARCHAR)")
        conn.exec_driver_sql("CREATE TABLE events_sync (event_id VARCHAR, updated_at TIMESTAMP, "
                             "external_id VARCHAR, payload VARCHAR)")
        conn.execute(sa.text("INSERT INTO users_sync VALUES (:updated_at, :external_id, "
                             ":payload)"), user_rows(USERS, step=timedelta(hours=1)))
        conn.execute(sa.text("INSERT INTO users_sync VALUES (:t, 'u-bad', '{\"plan\": ')"),
                     {"t": T0})
        conn.execute(sa.text("INSERT INTO events_sync VALUES (:event_id, :updated_at, "
                             ":external_id, :payload)"),
                     event_rows(EVENTS, step=timedelta(minutes=30)))
    engine.dispose()
    folder = root / "config"
    folder.mkdir()
    service = {"base_url": base_url, "retry_deadline_seconds": 60}
    write_integration(folder, "users", {
        "kind": "attributes", "warehouse": {"url": url}, "source": {"table": "users_sync"},
        "service": service})
    write_integration(folder, "events", {
        "kind": "events", "warehouse": {"url": url}, "source": {"table": "events_sync"},
        "row_key": ["EVENT_ID"], "service": service})
    return folder


@pytest.fixture
def users_yaml(sandbox: SandboxHandle, tmp_path: Path,  # noqa: F811
               monkeypatch: pytest.MonkeyPatch) -> Path:
    """The `users` integration of `build_folder` in `tmp_path`, on a sandbox just reset, its
    key in ENGAGE_API_KEY (a flow run in this process reads it)."""
    sandbox.reset()
    monkeypatch.setenv("ENGAGE_API_KEY", sandbox.api_key)
    return build_folder(tmp_path, sandbox.base_url) / "users.yaml"


def start_serve(folder: Path, state_url: str, api: str, api_key: str, log: Path,
                *schedule: str) -> subprocess.Popen[bytes]:
    """`python deployments/serve.py FOLDER SCHEDULE... --poll 1` in its own session."""
    env = {**os.environ, "ENGAGE_API_KEY": api_key, "PREFECT_API_URL": api}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "deployments" / "serve.py"), str(folder), *schedule,
             "--poll", "1", "--state-url", state_url],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_deployments(proc: subprocess.Popen[bytes], log: Path, *names: str) -> None:
    """Until the server knows every deployment named (300 s at most: a loaded machine)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + 300
    with get_client(sync_client=True) as client:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve.py exited:\n{log.read_text()[-3000:]}")
            try:
                for name in names:
                    client.read_deployment_by_name(name)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


@pytest.fixture(scope="module")
def served(prefect_api: str, sandbox: SandboxHandle,  # noqa: F811
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`python deployments/serve.py` over a fresh folder: deployments engage-sync/users and
    engage-sync/events, a yearly cron (never due in a test) and a weekly full resync."""
    sandbox.reset()
    root = tmp_path_factory.mktemp("served")
    folder = build_folder(root, sandbox.base_url)
    state_url = f"sqlite:///{root / 'state.db'}"
    log = root / "serve.log"
    proc = start_serve(folder, state_url, prefect_api, sandbox.api_key, log,
                       "--cron", "0 0 1 1 *", "--full-resync-cron", "0 3 1 1 *")
    try:
        wait_for_deployments(proc, log, "engage-sync/users", "engage-sync/events")
        yield Served(folder, state_url, sandbox)
    finally:
        _stop(proc)
