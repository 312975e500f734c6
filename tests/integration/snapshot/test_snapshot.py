"""`changes: snapshot` end to end on DuckDB and PostgreSQL, counted at the sandbox: a model of
5,000 users × 4 attributes without UPDATED_AT, compared with its snapshot in the warehouse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.files import load_integration
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import ConfigError, RunRefused
from engage_sync.snapshot import advance
from engage_sync.snapshot.layout import layout_of
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

USERS = 5000
ATTRIBUTES = ("plan", "city", "score", "vip")


def _rows(n: int = USERS, start: int = 0) -> list[dict[str, Any]]:
    return [{"user_id": f"u{i:05d}", "plan": "free", "city": ["Lyon", "Oslo"][i % 2],
             "score": i, "vip": i % 7 == 0} for i in range(start, start + n)]


def _model(wh: Warehouse, svc: Service, folder: Path, schema: str | None = None,
           **extra: Any) -> Path:
    """The model and its integration; the snapshot in `schema`, else in the connection's
    own (a PostgreSQL test's schema: its tables go with it)."""
    wh.create("model", [("user_id", sa.String()), ("plan", sa.String()),
                        ("city", sa.String()), ("score", sa.Integer()),
                        ("vip", sa.Boolean())])
    wh.insert("model", _rows())
    return write_integration(folder, "traits", {
        "kind": "attributes", "changes": "snapshot",
        "warehouse": {"url": wh.url},
        "source": {"table": "model"},
        "mapping": {"identifier": {"external_id": "user_id"},
                    "attributes": {a: a for a in ATTRIBUTES}},
        **({"snapshot": {"schema": schema}} if schema else {}),
        "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60},
        **extra})


def _run(path: Path, state: StateStore) -> dict[str, Any]:
    record = sync_file(path, store=state).record
    assert record is not None
    return record


def _points(svc: Service) -> int:
    return int(svc.counters()["data_points"])


def _objects(svc: Service) -> int:
    return int(svc.counters()["attributes_processed"])


def test_first_run_sends_everyone_then_only_what_changed(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    schema = f"snap_{tmp_path.name.lower()[-20:]}".replace("-", "_")  # a schema of its own
    path = _model(warehouse, service, tmp_path, schema=schema)
    first = _run(path, state)
    assert _objects(service) == USERS and _points(service) == USERS * len(ATTRIBUTES)
    assert first["rows_synced"] == USERS and first["job_status"] == "success"
    requests = len(service.requests())

    again = _run(path, state)  # nothing changed: no request at all
    assert len(service.requests()) == requests
    assert again["rows_read"] == 0 and again["job_status"] == "success"

    warehouse.execute("UPDATE model SET plan = 'gold' WHERE score < 100")
    changed = _run(path, state)
    assert _points(service) == USERS * len(ATTRIBUTES) + 100
    assert changed["data_points_sent"] == 100 and changed["rows_synced"] == 100
    sent = [o for r in service.requests()[requests:] for o in r["body"]["attributes"]]
    assert {"external_id": "u00000", "plan": "gold"} in sent  # requests may arrive in any order
    assert len(service.requests()) == requests + 2  # 100 objects, 75 a request


def test_a_column_mapped_to_another_attribute_is_sent_whole_there(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    """Same values, another attribute: every user's row is compared again (its row digest
    names where the snapshot keeps each attribute) and the new attribute sent to all."""
    path = _model(warehouse, service, tmp_path)
    _run(path, state)
    renamed = write_integration(tmp_path, "traits", {
        **yaml.safe_load(path.read_text()),
        "mapping": {"identifier": {"external_id": "user_id"},
                    "attributes": {**{a: a for a in ATTRIBUTES}, "city": "home_city"}}})
    before = _points(service)
    moved = _run(renamed, state)
    assert moved["rows_synced"] == USERS and _points(service) == before + USERS
    profile = service.profile("u00001")
    assert profile is not None and profile["attributes"]["home_city"] == "Oslo"
    assert _run(renamed, state)["rows_read"] == 0


def test_leavers_are_cleared_only_of_what_engage_sync_set(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    sandbox_key: str
) -> None:
    # profiles engage-sync never wrote, and an attribute another tool set on a leaver
    seed_profiles(service, sandbox_key, [{"external_id": f"x{i:03d}", "plan": "other"}
                                         for i in range(20)]
                  + [{"external_id": "u00001", "loyalty": "gold"}])
    path = _model(warehouse, service, tmp_path, on_leave="clear")
    _run(path, state)
    before = _points(service)
    warehouse.execute("DELETE FROM model WHERE score < 100")
    left = _run(path, state)
    assert _points(service) == before + 100 * len(ATTRIBUTES)  # 400 removals
    assert left["data_points_sent"] == 400 and left["rows_synced"] == 100
    assert left["rows_left"] == 100
    gone = service.profile("u00001")
    assert gone is not None and gone["attributes"] == {"loyalty": "gold"}
    assert all(service.profile(f"x{i:03d}")["attributes"] == {"plan": "other"}  # type: ignore[index]
               for i in range(20))
    assert _run(path, state)["rows_read"] == 0  # the leavers left the snapshot too

    warehouse.insert("model", _rows(1, start=1))  # a user who comes back is sent whole
    back_at = len(service.requests())
    _run(path, state)
    (request,) = service.requests()[back_at:]
    assert request["body"]["attributes"] == [
        {"external_id": "u00001", "plan": "free", "city": "Oslo", "score": 1, "vip": False}]


def test_an_emptied_model_stops_before_any_request(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _model(warehouse, service, tmp_path, on_leave="clear")
    _run(path, state)
    requests = len(service.requests())
    warehouse.execute("DELETE FROM model")
    with pytest.raises(ConfigError) as refused:
        _run(path, state)
    assert len(service.requests()) == requests
    message = str(refused.value)
    assert "5000" in message and "(500:" in message and "max_leaves" in message
    last = page(state, "traits", None).results[0]
    assert last["job_status"] == "config_error" and "5000" in last["message"]


def test_a_run_killed_while_clearing_resumes_and_clears_each_attribute_once(
    warehouse: Warehouse, service: Service, tmp_path: Path, sandbox_key: str
) -> None:
    path = _model(warehouse, service, tmp_path, on_leave="clear",
                  service={"base_url": service.base_url, "retry_deadline_seconds": 60,
                           "max_in_flight": 1})
    state_url, before, at, record = killed_after_change(
        path, warehouse, service, sandbox_key, "DELETE FROM model WHERE score < 300", 2,
        lambda: service.counters()["data_points_by_key"]["attributes"])

    after = service.counters()["data_points_by_key"]["attributes"]
    assert {a: after[a] - before[a] for a in ATTRIBUTES} == {a: 300 for a in ATTRIBUTES}
    cleared = [(o["external_id"], k) for r in service.requests()[at:] if r["status"] == 201
               for o in r["body"]["attributes"] for k in o if k != "external_id"]
    assert len(cleared) == len(set(cleared)) == 300 * len(ATTRIBUTES)
    assert record["job_status"] == "success"
    assert resume_cli(path, state_url, sandbox_key)["rows_read"] == 0


def test_users_whose_requests_failed_are_sent_again_by_the_next_run(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _model(warehouse, service, tmp_path,
                  service={"base_url": service.base_url, "retry_deadline_seconds": 0.5})
    _run(path, state)
    warehouse.execute("UPDATE model SET city = 'Rome' WHERE score < 100")
    before = _points(service)
    service.faults([{"path": "/users/track", "action": "503"}])
    failed = _run(path, state)
    service.faults([])
    assert failed["rows_synced"] == 0 and _points(service) == before
    again = _run(path, state)  # the snapshot did not move over them: sent now, once
    assert again["rows_synced"] == 100 and _points(service) == before + 100
    assert _run(path, state)["rows_read"] == 0


def test_leavers_are_deleted_under_max_deletes_and_a_returning_user_is_sent_whole(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _model(warehouse, service, tmp_path, on_leave="delete", max_deletes=99)
    _run(path, state)
    warehouse.execute("DELETE FROM model WHERE score < 100")
    at = len(service.requests("/users/delete"))
    with pytest.raises(RunRefused, match="max_deletes"):  # 100 > 99: nothing sent
        _run(path, state)
    assert len(service.requests("/users/delete")) == at
    path = _model(warehouse, service, tmp_path, on_leave="delete")
    _run(path, state)  # the snapshot holds the 5,000 still
    warehouse.execute("DELETE FROM model WHERE score < 100")
    points = _points(service)
    deleted = _run(path, state)
    assert deleted["rows_synced"] == 100 and _points(service) == points
    assert service.profile("u00000") is None and service.profile("u00100") is not None
    assert sum(len(r["body"]["external_ids"])
               for r in service.requests("/users/delete")[at:]) == 100
    warehouse.insert("model", _rows(1))
    _run(path, state)
    assert service.requests()[-1]["body"]["attributes"] == [
        {"external_id": "u00000", "plan": "free", "city": "Lyon", "score": 0, "vip": True}]


def test_the_dry_run_predicts_new_changed_and_left_users_and_their_points(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _model(warehouse, service, tmp_path, on_leave="clear")
    dry = RunOptions(dry_run=True)
    first = sync_file(path, store=state, options=dry).dry_run
    assert first is not None and (first.users, first.points, first.requests) == (
        {"new": USERS, "changed": 0, "left": 0, "in_snapshot": 0, "stops": None},
        USERS * len(ATTRIBUTES), 67)
    assert len(service.requests()) == 0
    _run(path, state)
    warehouse.execute("UPDATE model SET plan = 'gold' WHERE score < 100")
    warehouse.execute("DELETE FROM model WHERE score >= 4950")
    warehouse.insert("model", _rows(10, start=USERS))
    predicted = sync_file(path, store=state, options=dry).dry_run
    assert predicted is not None and predicted.users == {
        "new": 10, "changed": 100, "left": 50, "in_snapshot": USERS, "stops": None}
    before = _points(service)
    record = _run(path, state)
    assert predicted.points == record["data_points_sent"] == _points(service) - before
    assert predicted.points == 10 * 4 + 100 + 50 * 4 and record["rows_left"] == 50


def test_row_digests_that_no_longer_match_cost_one_run_and_are_brought_up_to_date(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    """A snapshot whose row digests are not today's (another version's, a retyped column's):
    one run compares every user attribute by attribute and sends nothing, and the users' row
    digests are brought up to date, so that later runs do not compare them again."""
    path = _model(warehouse, service, tmp_path)
    _run(path, state)
    snapshot = layout_of(load_integration(path)).snapshot_name
    warehouse.execute(f"UPDATE {snapshot} SET engage_row = 0 WHERE user_id >= 'u00010'")
    warehouse.execute("UPDATE model SET plan = 'gold' WHERE score < 10")
    requests, points = len(service.requests()), _points(service)
    again = _run(path, state)
    assert again["job_status"] == "success" and _points(service) == points + 10
    assert len(service.requests()) == requests + 1
    with warehouse.engine.connect() as conn:
        stale = conn.execute(sa.text(f"SELECT count(*) FROM {snapshot} WHERE engage_row = 0"))
        assert stale.scalar_one() == 0


def test_a_row_without_an_identifier_is_reported_each_run_and_the_others_sent(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _model(warehouse, service, tmp_path)
    warehouse.insert("model", [{**_rows(1)[0], "user_id": None}])
    for _ in range(2):
        record = _run(path, state)
        assert record["rows_failed_with_errors"] == 1, record
    assert _objects(service) == USERS


def test_the_snapshot_moves_on_in_bounded_transactions_and_ends_whole(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut into transactions of 777 pending rows, the advance leaves the same snapshot: every
    user once, the changed ones moved on, the leavers gone; nothing is compared again."""
    groups: list[int] = []
    apply = advance._apply

    def counted(conn: sa.Connection, layout: Any, pairs: Any, skipped: Any) -> int:
        groups.append(sum(hi - (lo or 0) for lo, hi in pairs))
        return apply(conn, layout, pairs, skipped)

    monkeypatch.setattr(advance, "ROWS_A_TRANSACTION", 777)
    monkeypatch.setattr(advance, "_apply", counted)
    path = _model(warehouse, service, tmp_path, on_leave="clear", max_leaves="20%")
    _run(path, state)
    assert len(groups) == 7 and max(groups) == 777 and sum(groups) == USERS
    warehouse.execute("UPDATE model SET plan = 'gold' WHERE score < 1000")
    warehouse.execute("DELETE FROM model WHERE score >= 4700")
    before = _points(service)
    moved = _run(path, state)
    assert moved["rows_left"] == 300 and _points(service) == before + 1000 + 300 * 4
    assert _run(path, state)["rows_read"] == 0
    snapshot = layout_of(load_integration(path)).snapshot_name
    with warehouse.engine.connect() as conn:
        held = conn.execute(sa.text(f"SELECT count(*), count(DISTINCT user_id) FROM {snapshot}"))
        assert held.one() == (4700, 4700)
