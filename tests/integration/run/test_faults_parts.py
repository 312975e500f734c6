"""Faults of the parts a run depends on, driven for real: the PostgreSQL state database stopped
mid-run, the shared rate store (Redis, PostgreSQL) restarted mid-run, the warehouse's reading
connection terminated mid-read, the disk under a SQLite state database filling up, and the
run's clock stepping back an hour.

Events under `in_doubt: skip`, one request in flight. In every case nothing is lost, nothing
is sent twice, the records add up, and the operator gets one line naming the part that failed
and what to do (README, "What it guarantees")."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.failures import one_line
from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.errors import RunStopped, SourceError, StateUnavailable
from engage_sync.run.stop import StopRequest
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, Warehouse, event_rows, table_integration
from tests.pg_server import PostgresServer, find_bindir
from tests.redis_server import RedisServer

TRACK, BATCH = "/users/track", 75


def ids(n: int, start: int = 0) -> set[str]:
    return {f"e{i:06d}" for i in range(start, start + n)}


@pytest.fixture(scope="module")
def own_pg(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """A PostgreSQL server of this module only, which its tests stop and start again."""
    if find_bindir() is None:
        request.getfixturevalue("postgres_url")  # skips (or fails in CI) as the others do
    server = PostgresServer()
    server.start()
    yield server
    server.remove()


def fresh_database(server: PostgresServer) -> str:
    """The URL of a new, empty database on `server`."""
    name = f"state_{time.monotonic_ns() % 10**9}"
    admin = sa.create_engine(server.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return server.url.rsplit("/", 1)[0] + f"/{name}"


@contextmanager
def at_request(service: Service, n: int, act: Callable[[], None]) -> Iterator[None]:
    """Call `act` in a thread once the sandbox has received request `n` (held by a delay)."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while len(service.requests(TRACK)) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        act()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(60)


def hold(service: Service, n: int, seconds: float = 1.5) -> None:
    """The sandbox holds request `n` for `seconds`, then processes and answers it."""
    service.faults([{"path": TRACK, "action": "delay", "nth": [n], "delay_seconds": seconds}])


def events(wh: Warehouse, svc: Service, folder: Path, n: int, **extra: Any) -> Path:
    rows = event_rows(n, users=60, step=timedelta(milliseconds=500))
    service = {"max_in_flight": 1, **extra.pop("service", {})}
    return table_integration(wh, svc, folder, "events", rows, in_doubt="skip", service=service,
                             **extra)


def once(service: Service, expected: set[str]) -> None:
    """Every expected event at the service, none twice."""
    seen = Counter(service.event_ids())
    assert set(seen) == expected and max(seen.values()) == 1


def in_doubt(state: StateStore) -> set[str]:
    return {e["row_key"] for e in state.errors("events", limit=10_000) if e["kind"] == "in_doubt"}


# --- 1. the PostgreSQL state database stopped, or restarted, mid-run ------------------------


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
@pytest.mark.parametrize("outage", ["down", "restarted"])
def test_the_state_database_lost_mid_run_stops_it_resumable_and_the_next_run_resumes(
        warehouse: Warehouse, service: Service, tmp_path: Path, own_pg: PostgresServer,
        outage: str) -> None:
    """Request 3 is answered while the database is down (it cannot be settled: in doubt), or
    after it restarted (its settling fails on the lost connection, then is saved on a new
    one): either way the run stops with one line, and the next run resumes it."""
    path = events(warehouse, service, tmp_path, 300)
    store = open_state(fresh_database(own_pg))
    hold(service, 3, 1.5 if outage == "down" else 3.0)
    act = own_pg.stop if outage == "down" else lambda: (own_pg.stop(), own_pg.start())
    with at_request(service, 3, act), pytest.raises(StateUnavailable) as caught:
        sync_file(path, store=store)
    line = one_line(caught.value, "events")
    assert line.startswith("integration events: the state database at 127.0.0.1:"
                           f"{own_pg.port} is unreachable: ")
    assert "nothing settled is lost, and the next run resumes" in line
    service.faults([])
    if outage == "down":
        own_pg.start()
    else:  # back at once: the run row says why, its lease released for any host to resume it
        [run] = store.runs_newest_first("events", 0, 1)
        assert run["job_status"] == "running" and run["message"] == line
        assert run["lease_until"].replace(tzinfo=UTC) <= datetime.now(UTC)
    record = sync_file(path, store=store).record
    doubt = BATCH if outage == "down" else 0  # in flight at the loss, not saved: at most once
    assert record is not None and record["rows_read"] == 300
    assert record["rows_synced"] == 300 - doubt and record["rows_in_doubt"] == doubt
    assert in_doubt(store) == (ids(BATCH, 2 * BATCH) if doubt else set())  # and named
    once(service, ids(300))
    store.engine.dispose()


# --- 2. the shared rate store restarted mid-run ---------------------------------------------


@pytest.fixture(params=["redis", "postgres"])
def rate_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[tuple[str, Callable[[], None]]]:
    """(backend, restart it: stopped, 1 s gone, started again on the same port)."""
    if request.param == "redis":
        request.getfixturevalue("redis")  # skips without redis-server
        server: RedisServer | PostgresServer = RedisServer()
        server.start()
        url = server.url
    else:
        server = request.getfixturevalue("own_pg")
        url = server.url
    monkeypatch.setenv("BUDGET_URL", url)

    def restart() -> None:
        server.stop()
        time.sleep(1.0)
        server.start()

    yield request.param, restart
    if request.param == "redis":
        server.stop()


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_the_shared_rate_store_restarted_mid_run_pauses_the_run_which_finishes(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        rate_store: tuple[str, Callable[[], None]], caplog: pytest.LogCaptureFixture) -> None:
    backend, restart = rate_store
    path = events(warehouse, service, tmp_path, 200, service={
        "limits": {"objects_per_request": 20}, "rate_limit": {"requests": 5, "per_seconds": 1},
        "rate_budget": {"backend": backend, "url": "${BUDGET_URL}"}})
    with at_request(service, 3, restart), caplog.at_level(logging.WARNING, "engage_sync"):
        record = sync_file(path, store=state).record
    assert record is not None and record["job_status"] == "success"
    assert record["rows_read"] == record["rows_synced"] == 200 and record["rows_in_doubt"] == 0
    once(service, ids(200))
    [line] = [r.getMessage() for r in caplog.records if "shared rate budget" in r.getMessage()]
    assert f"the shared rate budget ({backend} at " in line and "did not answer" in line
    assert "pauses for up to 5 s" in line


# --- 3. the warehouse's connection dropped mid-read -----------------------------------------


def terminate_readers(url: str) -> int:
    """pg_terminate_backend on every other backend reading the events table."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        killed = conn.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND (query ILIKE '%events_sync%' "
            "OR query ILIKE 'FETCH%')")).scalar_one()
    engine.dispose()
    return int(killed)


@pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
def test_the_warehouse_dropped_mid_read_stops_the_run_and_the_next_reads_every_row_once(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path) -> None:
    path = events(warehouse, service, tmp_path, 3000, extract_batch_rows=100,
                  warehouse={"reader": "sqlalchemy"})  # a server-side cursor, 100 rows a fetch
    hold(service, 3)
    killed: list[int] = []
    with at_request(service, 3, lambda: killed.append(terminate_readers(warehouse.url))), \
            pytest.raises(SourceError) as caught:
        sync_file(path, store=state)
    assert killed and killed[0] >= 1
    line = one_line(caught.value, "events")
    port = sa.engine.make_url(warehouse.url).port
    assert f"reading table events_sync from the warehouse (postgresql at 127.0.0.1:{port}) " \
           "failed: " in line and "the next run reads on from there" in line
    [first] = state.runs_newest_first("events", 0, 1)
    assert first["job_status"] == "error" and first["message"] in line
    service.faults([])
    record = sync_file(path, store=state).record
    assert record is not None and record["job_status"] == "success"
    assert first["rows_synced"] + record["rows_synced"] == 3000
    assert first["rows_in_doubt"] == record["rows_in_doubt"] == 0
    once(service, ids(3000))


# --- 4. the disk under a SQLite state database fills up --------------------------------------


class FullDisk:
    """A SQLite state database whose disk fills on demand: on a 16 MB tmpfs mounted for the
    test (as root), else, where mounting is refused, held to its size by SQLite's own
    `PRAGMA max_page_count` on every connection. Either way a write then ends SQLITE_FULL."""

    def __init__(self, folder: Path) -> None:
        self.disk = folder / "disk"
        self.disk.mkdir()
        self.mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(self.disk)],
            capture_output=True).returncode == 0
        self.store = open_state(f"sqlite:///{self.disk / 'state.db'}")
        self.pages: int | None = None
        if not self.mounted:
            sa.event.listen(self.store.engine, "checkout", self._limit)

    def _limit(self, dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count = {self.pages or 1073741823}")

    def fill(self) -> None:
        if not self.mounted:
            with sqlite3.connect(self.disk / "state.db") as conn:
                self.pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            return
        with open(self.disk / "filler", "wb") as out:
            try:
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()
                    os.fsync(out.fileno())
            except OSError:
                pass

    def free(self) -> None:
        self.pages = None
        if self.mounted:
            (self.disk / "filler").unlink()

    def remove(self) -> None:
        self.store.engine.dispose()
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.disk)], check=False)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[FullDisk]:
    disk = FullDisk(tmp_path)
    yield disk
    disk.remove()


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_full_disk_under_the_sqlite_state_database_stops_the_run_resumable(
        warehouse: Warehouse, service: Service, tmp_path: Path, full_disk: FullDisk) -> None:
    path, store = events(warehouse, service, tmp_path, 1500), full_disk.store
    hold(service, 3)  # the disk fills while request 3 is held; some later write fails
    with at_request(service, 3, full_disk.fill), pytest.raises(StateUnavailable) as caught:
        sync_file(path, store=store)
    line = one_line(caught.value, "events")
    assert f"the state database {full_disk.disk / 'state.db'} cannot be written: " in line
    assert "the disk under it is full: free space there" in line
    assert "nothing settled is lost, and the next run resumes" in line
    service.faults([])
    full_disk.free()
    record = sync_file(path, store=store).record
    assert record is not None and record["rows_read"] == 1500
    assert record["rows_synced"] + record["rows_in_doubt"] == 1500
    assert len(in_doubt(store)) in (0, BATCH)  # a request whose answer could not be saved
    once(service, ids(1500))


# --- 5. the clock steps back an hour --------------------------------------------------------


class SteppedClock:
    """The run's clock (`Deps.clock`): the real time, less `back` once stepped."""

    def __init__(self) -> None:
        self.back = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) - self.back


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_clock_stepped_back_an_hour_never_moves_the_cursor_back_nor_skips_a_row(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    rows = event_rows(300, at=now - timedelta(minutes=90), step=timedelta(seconds=10))
    path = events(warehouse, service, tmp_path, 0, settle_lag="1m", lookback="30m")
    warehouse.insert("events_sync", rows)  # stamped 90 to 40 minutes ago
    clock, stop = SteppedClock(), StopRequest()

    def step_back_and_stop() -> None:
        clock.back = timedelta(hours=1)
        stop.set("the test")

    hold(service, 2)  # stopped while request 2 is held, the clock an hour back from then on
    with at_request(service, 2, step_back_and_stop), pytest.raises(RunStopped):
        sync_file(path, store=state, clock=clock, stop=stop)
    service.faults([])
    resumed = sync_file(path, store=state, clock=clock).record  # its window was stored
    assert resumed is not None and resumed["rows_read"] == resumed["rows_synced"] == 300
    cursor = state.cursor("events")
    later = event_rows(350, at=now - timedelta(minutes=30), step=timedelta(seconds=1))[300:]
    warehouse.insert("events_sync", later)  # after the cursor, before the real signpost
    behind = sync_file(path, store=state, clock=clock).record  # its signpost before the cursor
    assert behind is not None and behind["job_status"] == "success"
    assert behind["rows_synced"] == behind["rows_in_doubt"] == 0
    assert state.cursor("events") == cursor  # not moved back
    clock.back = timedelta(0)
    caught_up = sync_file(path, store=state, clock=clock).record
    assert caught_up is not None and caught_up["rows_synced"] == 50
    moved = state.cursor("events")
    assert cursor is not None and moved is not None and moved > cursor
    once(service, ids(350))
