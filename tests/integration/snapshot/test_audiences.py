"""`kind: audience` end to end on DuckDB and PostgreSQL, counted at the sandbox: 10,000 users in
3 audiences kept as one array attribute, then as booleans; memberships compared with their
snapshot in the warehouse (`changes: snapshot`'s machinery, keyed by (user, audience))."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import ConfigError, SourceError
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    killed_after_change,
    resume_cli,
    write_integration,
)

USERS = 10_000
AUDIENCES = ("churn_risk", "vip", "new_buyer")


def _memberships(n: int = USERS) -> list[dict[str, Any]]:
    """Each user in one audience (i % 3); every tenth user not in vip also in vip."""
    rows = [{"user_id": f"u{i:05d}", "audience": AUDIENCES[i % 3]} for i in range(n)]
    rows += [{"user_id": f"u{i:05d}", "audience": "vip"} for i in range(n)
             if i % 10 == 0 and i % 3 != 1]
    return rows


def _model(wh: Warehouse, svc: Service, folder: Path, rows: list[dict[str, Any]],
           audience: dict[str, Any], user: str = "user_id", **extra: Any) -> Path:
    wh.create("audiences", [("user_id", sa.String()), ("audience", sa.String())])
    wh.insert("audiences", rows)
    return write_integration(folder, "segments", {
        "kind": "audience", "warehouse": {"url": wh.url},
        "source": {"table": "audiences"},
        "mapping": {"identifier": {"external_id": user}},
        "audience": audience,
        "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60}, **extra})


ARRAY = {"name_column": "audience", "attribute": "audiences", "as": "array"}


def _run(path: Path, state: StateStore, **options: Any) -> dict[str, Any]:
    outcome = sync_file(path, store=state, options=RunOptions(**options))
    result = outcome.record if outcome.dry_run is None else outcome.dry_run.summary("segments")
    assert result is not None
    return result


def _points(svc: Service) -> int:
    return int(svc.counters()["data_points"])


def _audiences(svc: Service, user: str) -> Any:
    profile = svc.profile(user)
    assert profile is not None
    return profile["attributes"].get("audiences")


def test_array_audiences_enter_stay_move_and_leave(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    rows = _memberships()
    path = _model(warehouse, service, tmp_path, rows, ARRAY)
    predicted = _run(path, state, dry_run=True)  # before any snapshot table: nothing made
    assert predicted["users"]["new"] == len(rows) == predicted["data_points_sent"]
    first = _run(path, state)
    assert _points(service) == len(rows)  # one point a membership
    assert first["rows_synced"] == len(rows) and first["job_status"] == "success"
    assert sorted(_audiences(service, "u00000")) == ["churn_risk", "vip"]
    assert _audiences(service, "u00001") == ["vip"]
    assert _audiences(service, "u00002") == ["new_buyer"]
    requests = len(service.requests())

    again = _run(path, state)  # nothing changed: no request at all
    assert len(service.requests()) == requests and again["rows_read"] == 0

    moved = [f"u{i:05d}" for i in range(0, 600, 3) if i % 10 != 0][:100]
    warehouse.execute("UPDATE audiences SET audience = 'new_buyer' WHERE audience = "
                      "'churn_risk' AND user_id IN (" + ",".join(f"'{u}'" for u in moved) + ")")
    predicted = _run(path, state, dry_run=True)
    assert predicted["users"]["new"] == 100 and predicted["users"]["left"] == 100
    assert predicted["data_points_sent"] == 200 and len(service.requests()) == requests
    before = _points(service)
    move = _run(path, state)
    assert _points(service) == before + 200  # entering one, leaving one
    assert move["data_points_sent"] == 200 and move["rows_left"] == 100
    assert _audiences(service, moved[0]) == ["new_buyer"]

    warehouse.execute("DELETE FROM audiences WHERE user_id = 'u00000'")  # leaves both
    before = _points(service)
    _run(path, state)
    assert _points(service) == before + 2
    assert _audiences(service, "u00000") == []  # an empty array, not a missing attribute
    assert _run(path, state)["rows_read"] == 0


def test_boolean_audience_is_true_while_in_and_false_after(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    rows = [{"user_id": f"u{i:05d}", "audience": None} for i in range(300)]
    rows += rows[:10]  # a user returned twice is one membership
    path = _model(warehouse, service, tmp_path, rows,
                  {"name": "churn_risk", "as": "boolean"})
    _run(path, state)
    assert _points(service) == 300
    profile = service.profile("u00007")
    assert profile is not None and profile["attributes"]["audience_churn_risk"] is True
    warehouse.execute("DELETE FROM audiences WHERE user_id < 'u00010'")
    left = _run(path, state)
    assert _points(service) == 310 and left["rows_left"] == 10
    profile = service.profile("u00007")
    assert profile is not None and profile["attributes"]["audience_churn_risk"] is False
    assert _run(path, state)["rows_read"] == 0


def test_leaving_more_memberships_than_max_leaves_stops_before_any_request(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    rows = [{"user_id": f"u{i:05d}", "audience": AUDIENCES[i % 3]} for i in range(300)]
    path = _model(warehouse, service, tmp_path, rows,  # names as dbt's docs spell them
                  {**ARRAY, "name_column": "AUDIENCE"}, user="USER_ID", max_leaves=20)
    _run(path, state)
    assert _points(service) == 300
    requests = len(service.requests())
    warehouse.execute("DELETE FROM audiences WHERE audience = 'vip'")
    with pytest.raises(ConfigError) as refused:
        _run(path, state)
    assert len(service.requests()) == requests
    assert "100 memberships" in str(refused.value) and "max_leaves" in str(refused.value)


def test_memberships_moved_to_another_attribute_are_all_sent_there(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    rows = [{"user_id": f"u{i:05d}", "audience": AUDIENCES[i % 3]} for i in range(300)]
    path = _model(warehouse, service, tmp_path, rows, ARRAY)
    _run(path, state)
    path = write_integration(tmp_path, "segments", {
        **yaml.safe_load(path.read_text()), "audience": {**ARRAY, "attribute": "segments"}})
    moved = _run(path, state)
    assert moved["rows_synced"] == 300 and _points(service) == 600
    profile = service.profile("u00004")
    assert profile is not None and profile["attributes"]["segments"] == ["vip"]
    assert _run(path, state)["rows_read"] == 0


def test_a_name_column_missing_from_the_model_is_named(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _model(warehouse, service, tmp_path, [{"user_id": "u1", "audience": "vip"}],
                  {**ARRAY, "name_column": "segment"})
    with pytest.raises(SourceError, match="column 'segment' is not in table audiences"):
        _run(path, state)  # the schema guard, before any request
    assert service.requests() == []


def test_a_run_killed_while_moving_resumes_and_sends_each_membership_once(
    warehouse: Warehouse, service: Service, tmp_path: Path, sandbox_key: str
) -> None:
    rows = [{"user_id": f"u{i:05d}", "audience": AUDIENCES[i % 3]} for i in range(3000)]
    path = _model(warehouse, service, tmp_path, rows, ARRAY, max_leaves="50%",
                  service={"base_url": service.base_url, "retry_deadline_seconds": 60,
                           "max_in_flight": 1})
    state_url, before, at, record = killed_after_change(
        path, warehouse, service, sandbox_key,
        "UPDATE audiences SET audience = 'vip' WHERE audience = 'churn_risk'", 10,
        lambda: _points(service))

    assert _points(service) - before == 2000  # 1,000 users in, 1,000 out, each once
    sent = [(o["external_id"], str(o["audiences"])) for r in service.requests()[at:]
            if r["status"] == 201 for o in r["body"]["attributes"]]
    assert len(sent) == len(set(sent)) == 2000
    assert record["job_status"] == "success"
    assert _audiences(service, "u00000") == ["vip"]
    assert resume_cli(path, state_url, sandbox_key)["rows_read"] == 0
