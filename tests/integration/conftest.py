"""Integration fixtures: real warehouses (DuckDB file, PostgreSQL server), the sandbox over
loopback, a state database per test, and a writer of integration files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import sqlalchemy as sa
import uvicorn
import yaml

from engage_sandbox.state.settings import RateLimit, SandboxSettings
from engage_sandbox.web.server import SandboxHandle, run_sandbox
from engage_sync.adapters.wiring import open_state
from engage_sync.config.files import load_integration
from engage_sync.config.integration import Integration
from engage_sync.state import field_codec
from engage_sync.state import fields as field_record
from engage_sync.state.schema import fields
from engage_sync.state.store import StateStore
from tests.snowflake_emulator import Emulator, snowflake_emulator

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
T0 = datetime(2026, 1, 1, 0, 0, 0)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxHandle]:
    """Full-mode sandbox with the demo seed; /users/track windows of 1 s keep 429 tests short."""
    settings = SandboxSettings(
        seed=ROOT / "config" / "sandbox-seed.yaml",
        rate_limits={"users_track": RateLimit(3000, 1)},
    )
    with run_sandbox(settings=settings) as handle:
        yield handle


@pytest.fixture(scope="session")
def snowflake() -> Iterator[Emulator]:
    """Snowflake's emulator (fakesnow's HTTP server) on loopback, for the session."""
    with snowflake_emulator() as emulator:
        yield emulator


@pytest.fixture
def service(sandbox: SandboxHandle, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    sandbox.reset()
    monkeypatch.setenv("ENGAGE_API_KEY", sandbox.api_key)
    with httpx.Client(base_url=sandbox.control_url, timeout=30) as control:
        yield Service(sandbox.base_url, control)


@dataclass
class Service:
    """The sandbox as the tests see it: its URL and its control plane."""

    base_url: str
    control: httpx.Client

    def faults(self, rules: list[dict[str, Any]]) -> None:
        self.control.post("/faults", json=rules).raise_for_status()

    def counters(self) -> dict[str, Any]:
        return dict(self.control.get("/counters").json())

    def requests(self, path: str = "/users/track") -> list[dict[str, Any]]:
        body = self.control.get("/requests", params={"path": path}).json()
        return list(body["requests"] if isinstance(body, dict) else body)

    def profile(self, external_id: str) -> dict[str, Any] | None:
        r = self.control.get("/profiles", params={"external_id": external_id})
        return None if r.status_code == 404 else dict(r.json())

    def profiles(self) -> list[dict[str, Any]]:
        body = self.control.get("/profiles").json()
        return list(body["profiles"] if isinstance(body, dict) else body)

    def event_ids(self) -> list[str]:
        """The `eid` property of every event the sandbox holds (one entry per event)."""
        return [e["properties"]["eid"] for p in self.profiles() for e in p.get("events", [])
                if "eid" in (e.get("properties") or {})]


@dataclass
class Warehouse:
    """A real warehouse the tests write rows into; `url` is what an integration file names."""

    name: str
    url: str
    engine: sa.Engine

    def create(self, table: str, columns: Sequence[tuple[str, sa.types.TypeEngine[Any]]]) -> None:
        md = sa.MetaData()
        sa.Table(table, md, *(sa.Column(n, t) for n, t in columns))
        with self.engine.begin() as conn:
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{table}"')
        md.create_all(self.engine)

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        t = sa.table(table, *(sa.column(c) for c in rows[0]))
        with self.engine.begin() as conn:
            conn.execute(t.insert(), rows)

    def execute(self, sql: str, **params: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.text(sql), params)


@pytest.fixture(params=["duckdb", "postgres"])
def warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    if request.param == "duckdb":
        url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
        engine = sa.create_engine(url)
        yield Warehouse("duckdb", url, engine)
        engine.dispose()
    else:
        base = request.getfixturevalue("postgres_url")
        schema = f"t_{abs(hash(request.node.nodeid)) % 10**9}"
        admin = sa.create_engine(base)
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        url = f"{base}?options=-csearch_path%3D{schema}"
        engine = sa.create_engine(url)
        yield Warehouse("postgres", url, engine)
        engine.dispose()
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


@contextmanager
def served(app: Any, token: str) -> Iterator[httpx.Client]:
    """An ASGI app served by uvicorn on a free loopback port, and a client sending `token`."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


@pytest.fixture
def state(tmp_path: Path) -> StateStore:
    return open_state(f"sqlite:///{tmp_path / 'state.db'}")


@pytest.fixture(params=["sqlite", "postgres"])
def state_both(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    """A state database on SQLite (a file), then on PostgreSQL (a schema of its own)."""
    if request.param == "sqlite":
        yield StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
        return
    base = request.getfixturevalue("postgres_url")
    schema = f"state_{time.monotonic_ns() % 10**9}"
    admin = sa.create_engine(base)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    state = StateStore.from_url(f"{base}?options=-csearch_path%3D{schema}")
    yield state
    state.engine.dispose()
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    admin.dispose()


def write_integration(folder: Path, name: str, body: dict[str, Any]) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    load_integration(path)  # fail early in the test, not in the run
    return path


def users_table(wh: Warehouse, table: str = "users_sync") -> None:
    """The service's sync format, lower-case as PostgreSQL folds unquoted DDL."""
    wh.create(table, [("updated_at", sa.DateTime()), ("external_id", sa.String()),
                      ("payload", sa.Text())])


def events_table(wh: Warehouse, table: str = "events_sync") -> None:
    wh.create(table, [("event_id", sa.String()), ("updated_at", sa.DateTime()),
                      ("external_id", sa.String()), ("payload", sa.Text())])


def user_rows(n: int, *, at: datetime = T0, step: timedelta = timedelta(0), plan: str = "free",
              prefix: str = "u") -> list[dict[str, Any]]:
    return [{"updated_at": at + i * step, "external_id": f"{prefix}{i:05d}",
             "payload": json.dumps({"plan": plan, "n": i})} for i in range(n)]


def event_rows(n: int, *, at: datetime = T0, users: int = 50,
               step: timedelta = timedelta(0)) -> list[dict[str, Any]]:
    return [{"event_id": f"e{i:06d}", "updated_at": at + i * step,
             "external_id": f"u{i % users:05d}",
             "payload": json.dumps({"name": "viewed", "properties": {"eid": f"e{i:06d}"}})}
            for i in range(n)]


def integration_body(wh: Warehouse, svc: Service, kind: str, table: str,
                     **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": kind,
        "warehouse": {"url": wh.url},
        "source": {"table": table},
        "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60},
    }
    if kind != "attributes":
        body["row_key"] = ["EVENT_ID"]
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return body


def table_integration(wh: Warehouse, svc: Service, folder: Path, kind: str,
                      rows: list[dict[str, Any]], name: str | None = None,
                      **extra: Any) -> Path:
    """The common preamble: create the sync table of `kind` (attributes: users_sync, other
    kinds: events_sync), insert `rows`, and write the integration file (`users` / `events`)."""
    users = kind == "attributes"
    table = "users_sync" if users else "events_sync"
    (users_table if users else events_table)(wh)
    wh.insert(table, rows)
    return write_integration(folder, name or ("users" if users else "events"),
                             integration_body(wh, svc, kind, table, **extra))


def load(path: Path) -> Integration:
    return load_integration(path)


def utcnow() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def sandbox_key(sandbox: SandboxHandle) -> str:
    return sandbox.api_key


# --- subscription and identity kinds (tests/integration/kinds/test_kinds.py) ----------------------

SUBSCRIPTION_LIMIT = 10  # requests per 1-second window at the slow sandbox


@pytest.fixture(scope="session")
def slow_subscriptions_sandbox() -> Iterator[SandboxHandle]:
    """A second sandbox whose `subscription` group allows SUBSCRIPTION_LIMIT requests a second,
    so a shared client budget can be measured against the sandbox's own windows."""
    settings = SandboxSettings(
        seed=ROOT / "config" / "sandbox-seed.yaml",
        rate_limits={"subscription": RateLimit(SUBSCRIPTION_LIMIT, 1)},
    )
    with run_sandbox(settings=settings) as handle:
        yield handle


@pytest.fixture
def slow_service(slow_subscriptions_sandbox: SandboxHandle,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    slow_subscriptions_sandbox.reset()
    monkeypatch.setenv("ENGAGE_API_KEY", slow_subscriptions_sandbox.api_key)
    with httpx.Client(base_url=slow_subscriptions_sandbox.control_url, timeout=30) as control:
        yield Service(slow_subscriptions_sandbox.base_url, control)


def seed_profiles(svc: Service, api_key: str, objects: list[dict[str, Any]]) -> None:
    """Create or update profiles through /users/track, 75 objects a request."""
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=svc.base_url, timeout=30) as client:
        for k in range(0, len(objects), 75):
            r = client.post("/users/track", json={"attributes": objects[k:k + 75]},
                            headers=headers)
            r.raise_for_status()
            assert "errors" not in r.json(), r.json()


# --- a run as its own process, killed and resumed ----------------------------------------


def run_cli(path: Path, state_url: str, api_key: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ENGAGE_API_KEY": api_key}
    return subprocess.Popen(
        [sys.executable, "-m", "engage_sync.cli.main", "--log-level", "WARNING", "run",
         str(path),
         "--no-prefect", "--state-url", state_url],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def _wait_for_request(service: Service, n: int, proc: subprocess.Popen[bytes],
                      endpoint: str) -> None:
    deadline = time.monotonic() + 300
    while len(service.requests(endpoint)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never reached the request to kill at"
        time.sleep(0.05)


def _wait_until_answered(service: Service, endpoint: str) -> None:
    deadline = time.monotonic() + 300
    while any(r["status"] is None for r in service.requests(endpoint)):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _wait_while_held(service: Service, proc: subprocess.Popen[bytes], endpoint: str,
                     until: Callable[[], bool]) -> None:
    """Wait until `until()` holds, while the sandbox still holds the requests it delays."""
    while not until():
        assert proc.poll() is None, proc.communicate()
        held = [r for r in service.requests(endpoint) if r["fault"] == "delay"]
        assert held and all(r["status"] is None for r in held), (
            "a held request was answered before the state showed what the kill waits for")
        time.sleep(0.05)


def kill_during_request(path: Path, service: Service, key: str, state_url: str,
                        nth: int, endpoint: str = "/users/track",
                        until: Callable[[], bool] | None = None, hold: int = 1) -> None:
    """Start the run as its own process; SIGKILL it while the sandbox holds request `nth`
    (a `delay` fault: the sandbox waits, then finds the client gone and processes nothing).
    With `hold`, the sandbox holds that many requests from `nth` on, and the kill waits for
    the last: as many as the run's `max_in_flight`, and nothing after them is sent before the
    kill. With `until`, the kill also waits, while they are held, until `until()` holds: what
    the run's state must show at the kill (an answer is settled when the send loop saves it,
    not when it comes: `run/grouped_journal.py`)."""
    service.faults([{"path": endpoint, "action": "delay", "nth": list(range(nth, nth + hold)),
                     "delay_seconds": 4}])
    proc = run_cli(path, state_url, key)
    _wait_for_request(service, nth + hold - 1, proc, endpoint)
    if until is not None:
        _wait_while_held(service, proc, endpoint, until)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _wait_until_answered(service, endpoint)
    service.faults([])


def resume_cli(path: Path, state_url: str, key: str) -> dict[str, int]:
    resumed = run_cli(path, state_url, key)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err.decode()
    return dict(json.loads(out))


def killed_after_change(path: Path, warehouse: Warehouse, service: Service, key: str,
                        change: str, ahead: int, measure: Callable[[], T]
                        ) -> tuple[str, T, int, dict[str, int]]:
    """A first run of `path` as its own process (state in a SQLite file beside it); then
    `change` in the warehouse; then a run killed at its `ahead`-th request and resumed.
    Returns the state URL, `measure()` and the sandbox's request count before the killed run,
    and the resumed run's record."""
    state_url = f"sqlite:///{path.parent / 'state.db'}"
    warehouse.engine.dispose()  # the run's process opens the DuckDB file
    resume_cli(path, state_url, key)
    warehouse.execute(change)
    warehouse.engine.dispose()
    before, at = measure(), len(service.requests())
    kill_during_request(path, service, key, state_url, nth=at + ahead)
    return state_url, before, at, resume_cli(path, state_url, key)


def killed_after_the_helper_took_over(warehouse: Warehouse, service: Service, key: str,
                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                      ) -> tuple[Path, str]:
    """A first diffed run whose field helper takes over after 100 items (u00000-u00149 read
    "old", then "new", then 3,000 more users), killed at its 40th request, after its first
    settle (32 requests) logged what it digested itself. Returns the file and the state URL."""
    monkeypatch.setenv("ENGAGE_SYNC_FIELD_HELPER_AFTER", "100")  # after the first batch
    rows = [*user_rows(150, at=T0, plan="old"),
            *user_rows(150, at=T0 + timedelta(seconds=1), plan="new"),
            *user_rows(3000, at=T0 + timedelta(seconds=2), prefix="v")]
    path = table_integration(warehouse, service, tmp_path, "attributes", rows,
                             extract_batch_rows=100, service={"max_in_flight": 1})
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, key, state_url, nth=40)
    with StateStore.from_url(state_url).engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM engage_field_log").scalar()
    return path, state_url
def field_records(state: StateStore, integration: str) -> dict[bytes, dict[int, int]]:
    """The integration's folded field record: user key → digests."""
    with state.engine.connect() as conn:
        rows = conn.execute(sa.select(fields.c.user_key, fields.c.digests)
                            .where(fields.c.integration == integration)).all()
    return {bytes(k): field_codec.decode(bytes(d)) for k, d in rows}


def logged_deltas(state: StateStore, integration: str) -> int:
    """How many deltas of the integration wait in the field log."""
    with state.engine.connect() as conn:
        return field_record.logged(conn, integration)


ELSEWHERE = "elsewhere:1:aaaa0000"  # an owner on another host: only its lease tells


def held_run(state: StateStore, name: str) -> str:
    """An unfinished incremental run of `name` whose owner (`ELSEWHERE`) holds a lease for an
    hour: a start of the integration meanwhile is refused (RunInProgress)."""
    from engage_sync.cursor.window import Window
    from engage_sync.run.resume import open_run

    window = Window(start=None, signpost=None)
    return open_run(state, name, "incremental", None, True, lambda: window, lambda: None,
                    owner=ELSEWHERE, lease_seconds=3600).run_id
