"""`on_leave` with a cursor, end to end on DuckDB and PostgreSQL, counted at the sandbox: 1,000
users × 3 attributes synced by their `UPDATED_AT`; a due `leave_check` reads the identifiers
only and clears what engage-sync set on the users gone from the table."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import sync_file
from engage_sync.errors import ConfigError, RunRefused
from engage_sync.run import leave_check
from engage_sync.state.schema import runs
from engage_sync.state.store import StateStore
from engage_sync.status.record import page
from tests.integration.conftest import (
    Service,
    Warehouse,
    killed_after_change,
    resume_cli,
    seed_profiles,
    write_integration,
)

USERS = 1000
ATTRIBUTES = ("plan", "city", "score")
START = datetime(2026, 1, 1, tzinfo=UTC)


def _rows() -> list[dict[str, Any]]:
    return [{"user_id": f"u{i:04d}", "plan": "free", "city": ["Lyon", "Oslo"][i % 2],
             "score": i, "UPDATED_AT": START} for i in range(USERS)]


def _integration(wh: Warehouse, svc: Service, folder: Path, fill: bool = True,
                 **extra: Any) -> Path:
    """The integration's file; with `fill`, its table made anew with the 1,000 users."""
    if fill:
        wh.create("users", [("user_id", sa.String()), ("plan", sa.String()),
                            ("city", sa.String()), ("score", sa.Integer()),
                            ("UPDATED_AT", sa.DateTime(timezone=True))])
        wh.insert("users", _rows())
    return write_integration(folder, "people", {
        "kind": "attributes", "warehouse": {"url": wh.url}, "source": {"table": "users"},
        "mapping": {"identifier": {"external_id": "user_id"},
                    "attributes": {a: a for a in ATTRIBUTES}},
        "on_leave": "clear", "leave_check": {"every": "1d"},
        "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60}, **extra})


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def _run(path: Path, state: StateStore, clock: Clock) -> dict[str, Any]:
    record = sync_file(path, store=state, clock=clock).record
    assert record is not None
    return record


def _points(svc: Service) -> int:
    return int(svc.counters()["data_points"])


def _leave_runs(state: StateStore) -> list[dict[str, Any]]:
    """The records of the integration's leave checks (their runs' scope)."""
    with state.engine.connect() as conn:
        ids = set(conn.execute(sa.select(runs.c.run_id).where(
            runs.c.scope == leave_check.LEAVERS)).scalars())
    return [r for r in page(state, "people", None).results if r["run_id"] in ids]


@pytest.fixture
def schema(warehouse: Warehouse) -> Iterator[str]:
    """A schema of the warehouse the write-back creates, dropped after the test."""
    name = f"wbc_{uuid.uuid4().hex[:10]}"
    yield name
    warehouse.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def test_a_due_check_clears_only_what_engage_sync_set_on_the_users_gone(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    sandbox_key: str, monkeypatch: pytest.MonkeyPatch, schema: str
) -> None:
    reads: list[int] = []
    real = leave_check.read_keys

    def counted(*args: Any) -> Any:
        keys = real(*args)
        reads.append(keys.num_rows)
        return keys

    monkeypatch.setattr(leave_check, "read_keys", counted)
    seed_profiles(service, sandbox_key, [{"external_id": "u0001", "loyalty": "gold"},
                                         {"external_id": "x0001", "plan": "other"}])
    clock = Clock()
    path = _integration(warehouse, service, tmp_path, writeback={"schema": schema})
    seeded = _points(service)
    _run(path, state, clock)  # sends everyone; the first check remembers who is there
    assert reads == [USERS]
    sent = _points(service)
    assert sent == seeded + USERS * len(ATTRIBUTES)

    warehouse.execute("DELETE FROM users WHERE score < 50")
    requests = len(service.requests())
    _run(path, state, clock)  # the check is not due: no key is read, nothing sent
    assert reads == [USERS] and len(service.requests()) == requests

    clock.now += timedelta(days=1)
    _run(path, state, clock)
    assert reads == [USERS, USERS - 50]
    assert _points(service) == sent + 50 * len(ATTRIBUTES)  # 150 removals, nothing else
    gone = service.profile("u0001")
    assert gone is not None and gone["attributes"] == {"loyalty": "gold"}
    assert service.profile("x0001")["attributes"] == {"plan": "other"}  # type: ignore[index]
    (check,) = _leave_runs(state)
    assert check["rows_left"] == 50 and check["data_points_sent"] == 150
    with warehouse.engine.connect() as conn:  # written back: its count, one outcome a leaver
        assert conn.execute(sa.text(f"SELECT rows_left FROM {schema}.engage_sync_runs WHERE "
                                    "run_id = :r"), {"r": check["run_id"]}).all() == [(50,)]
        left = conn.execute(sa.text(f"SELECT user_id, outcome FROM {schema}."
                                    "engage_sync_row_outcomes WHERE run_id = :r ORDER BY "
                                    "user_id"), {"r": check["run_id"]}).all()
    assert left == [(f"u{i:04d}", "left") for i in range(50)]

    clock.now += timedelta(days=1)  # the leavers were cleared: the next check sends nothing
    requests = len(service.requests())
    _run(path, state, clock)
    assert len(service.requests()) == requests and len(reads) == 3

    warehouse.execute(  # a user who comes back is sent whole
        "INSERT INTO users VALUES ('u0001', 'free', 'Oslo', 1, '2026-02-01 00:00:00+00')")
    back_at = len(service.requests())
    _run(path, state, clock)
    (request,) = service.requests()[back_at:]
    assert request["body"]["attributes"] == [
        {"external_id": "u0001", "plan": "free", "city": "Oslo", "score": 1}]


def test_an_emptied_table_stops_the_check_before_any_request(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    clock = Clock()
    path = _integration(warehouse, service, tmp_path)
    _run(path, state, clock)
    requests = len(service.requests())
    warehouse.execute("DELETE FROM users")
    clock.now += timedelta(days=1)
    with pytest.raises(ConfigError) as refused:
        _run(path, state, clock)
    assert len(service.requests()) == requests
    message = str(refused.value)
    assert "1000" in message and "(100:" in message and "max_leaves" in message
    last = page(state, "people", None).results[0]
    assert last["job_status"] == "config_error" and "1000" in last["message"]


def test_a_check_killed_while_clearing_resumes_and_clears_each_attribute_once(
    warehouse: Warehouse, service: Service, tmp_path: Path, sandbox_key: str
) -> None:
    path = _integration(warehouse, service, tmp_path, max_leaves="50%",
                        leave_check={"every": 0},  # after every run: the CLI's own clock
                        service={"base_url": service.base_url, "retry_deadline_seconds": 60,
                                 "max_in_flight": 1})
    state_url, before, at, _ = killed_after_change(
        path, warehouse, service, sandbox_key, "DELETE FROM users WHERE score < 300", 2,
        lambda: service.counters()["data_points_by_key"]["attributes"])

    after = service.counters()["data_points_by_key"]["attributes"]
    assert {a: after[a] - before[a] for a in ATTRIBUTES} == {a: 300 for a in ATTRIBUTES}
    cleared = [(o["external_id"], k) for r in service.requests()[at:] if r["status"] == 201
               for o in r["body"]["attributes"] for k in o if k != "external_id"]
    assert len(cleared) == len(set(cleared)) == 300 * len(ATTRIBUTES)
    done = len(service.requests())
    resume_cli(path, state_url, sandbox_key)  # checked again: nothing of ours is left on them
    assert len(service.requests()) == done


def test_leavers_are_deleted_under_max_deletes_and_one_who_returns_is_sent_whole(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    clock = Clock()
    path = _integration(warehouse, service, tmp_path, on_leave="delete", max_deletes=19)
    _run(path, state, clock)
    warehouse.execute("DELETE FROM users WHERE score < 20")
    at = len(service.requests("/users/delete"))
    clock.now += timedelta(days=1)
    with pytest.raises(RunRefused, match="max_deletes"):  # 20 > 19: nothing sent
        _run(path, state, clock)
    assert len(service.requests("/users/delete")) == at

    path = _integration(warehouse, service, tmp_path, fill=False, on_leave="delete")
    points = _points(service)
    _run(path, state, clock)  # refused, so checked again
    assert sum(len(r["body"]["external_ids"])
               for r in service.requests("/users/delete")[at:]) == 20
    assert service.profile("u0000") is None and service.profile("u0020") is not None
    assert _points(service) == points
    (check,) = _leave_runs(state)[:1]
    assert check["rows_left"] == 20

    warehouse.execute(  # the same values as before: sent whole, its field record was dropped
        "INSERT INTO users VALUES ('u0000', 'free', 'Lyon', 0, '2026-02-01 00:00:00+00')")
    _run(path, state, clock)
    assert service.requests()[-1]["body"]["attributes"] == [
        {"external_id": "u0000", "plan": "free", "city": "Lyon", "score": 0}]
