"""Run ownership is a lease in the state database. Two processes on one
integration share a PostgreSQL state database; the first is frozen with SIGSTOP past its
lease: the second takes the run over and finishes it; the first, woken, stops without
sending. A live owner is never taken over before its lease expires."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import open_state
from engage_sync.cursor.window import Window
from engage_sync.errors import LeaseLost, RunRefused
from engage_sync.run.lease import Lease, new_owner
from engage_sync.run.resume import open_run
from tests.integration.conftest import (
    Service,
    Warehouse,
    event_rows,
    resume_cli,
    run_cli,
    table_integration,
)

LEASE = 2.0


@pytest.fixture
def pg_state_url(postgres_url: str) -> Iterator[str]:
    """A state database of its own on the PostgreSQL server, as a team would share."""
    schema = f"state_{time.monotonic_ns() % 10**9}"
    admin = sa.create_engine(postgres_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    yield f"{postgres_url}?options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    admin.dispose()


def _wait(predicate: object, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
def test_a_frozen_owner_is_taken_over_after_its_lease_and_stops_without_sending(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
    pg_state_url: str,
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events",
                             event_rows(600, users=60, step=timedelta(milliseconds=500)),
                             in_doubt="resend", lease_seconds=LEASE,
                             service={"max_in_flight": 1})
    # request 3 is held by the sandbox for 3 s: the first process is frozen while it waits
    service.faults([{"path": "/users/track", "action": "delay", "nth": [3],
                     "delay_seconds": 3}])
    first = run_cli(path, pg_state_url, sandbox_key)
    try:
        _wait(lambda: len(service.requests()) >= 3, "the first run never reached request 3")
        first.send_signal(signal.SIGSTOP)
        time.sleep(LEASE + 1.5)  # past the lease: no heartbeat while frozen
        service.faults([])
        record = resume_cli(path, pg_state_url, sandbox_key)  # the second process
        assert record["rows_synced"] == 600, record
        sent = len(service.requests())
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode != 0, err
    assert b"lost its lease" in err or b"owns the run now" in err, err
    assert len(service.requests()) == sent  # the woken first process sent nothing more
    ids = Counter(service.event_ids())
    assert set(ids) == {f"e{i:06d}" for i in range(600)}
    doubled = {k for k, v in ids.items() if v > 1}
    named = {e["row_key"] for e in open_state(pg_state_url).errors("events", limit=10_000)
             if e["kind"] == "duplicate"}
    assert doubled <= named  # request 3, processed for the frozen owner and sent again


def test_a_live_lease_is_never_taken_over(pg_state_url: str) -> None:
    state = open_state(pg_state_url)
    window = Window(start=None, signpost=None)

    def opening(owner: str) -> str:
        return open_run(state, "x", "incremental", None, True, lambda: window, lambda: None,
                        owner=owner, lease_seconds=LEASE).run_id

    holder = "elsewhere:1:aaaa0000"  # an owner on another host: its pid cannot be checked
    run_id = opening(holder)
    lease = Lease(state, run_id, holder, LEASE).start()
    try:
        time.sleep(LEASE * 1.5)  # renewed meanwhile: still held
        with pytest.raises(RunRefused, match="still in progress"):
            opening(new_owner())
    finally:
        lease.stop()
    time.sleep(LEASE + 0.5)
    assert opening(new_owner()) == run_id  # expired: taken over, the same run resumed
    assert lease.renew() is False  # the old holder learns it lost the run
    with pytest.raises(LeaseLost, match="lost its lease"):
        lease.check()


def test_a_run_finished_by_its_owner_is_not_reported_as_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The heartbeat can fire between the run's end and the lease's stop: that refused
    renewal is the owner's own finish, not a take-over, and says nothing."""
    state = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    window = Window(start=None, signpost=None)
    owner = new_owner()
    run_id = open_run(state, "x", "incremental", None, True, lambda: window, lambda: None,
                      owner=owner, lease_seconds=0.3).run_id
    lease = Lease(state, run_id, owner, 0.3).start()
    state.finish_run(run_id, "success")
    time.sleep(0.5)  # a heartbeat (every 0.1 s) is refused: the run is finished
    lease.stop()
    assert lease.lost
    assert "another process owns the run" not in caplog.text
    taken = open_run(state, "y", "incremental", None, True, lambda: window, lambda: None,
                     owner=new_owner(), lease_seconds=0.3).run_id
    other = Lease(state, taken, "elsewhere:1:bbbb0000", 0.3).start()  # never owned it
    time.sleep(0.5)
    other.stop()
    assert "another process owns the run now" in caplog.text
