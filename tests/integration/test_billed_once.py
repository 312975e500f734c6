"""Nothing billed twice (issue 21), counted at the sandbox: backfills, full resyncs and a
newly mapped column go through the field diff; `send_whole` sends whole when asked; and a
changed source schema stops a run before it sends anything (the schema guard)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import sync_file
from engage_sync.errors import SchemaChanged
from engage_sync.run.options import run_options
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    table_integration,
    write_integration,
)

ROWS = 120


def _points(service: Service) -> int:
    return int(service.counters()["data_points"])


def _run(path: Path, state: StateStore, mode: str = "incremental", *,
         start: datetime | None = None, end: datetime | None = None,
         send_whole: bool = False) -> dict[str, Any]:
    options = run_options(mode, start, end, False, False,  # type: ignore[arg-type]
                          send_whole=send_whole)
    record = sync_file(path, store=state, options=options).record
    assert record is not None
    return record


def _members(wh: Warehouse, svc: Service, folder: Path, attributes: dict[str, str],
             create: bool = True) -> Path:
    """A table of mapped columns (PLAN, TIER: every third row NULL), one row a minute."""
    if create:
        wh.create("members", [("updated_at", sa.DateTime()), ("user_id", sa.String()),
                              ("plan", sa.String()), ("tier", sa.String())])
        wh.insert("members", [
            {"updated_at": T0 + timedelta(minutes=i), "user_id": f"m{i:04d}",
             "plan": "free" if i % 2 else "pro", "tier": None if i % 3 == 0 else f"t{i % 5}"}
            for i in range(ROWS)])
    return write_integration(folder, "members", {
        "kind": "attributes", "warehouse": {"url": wh.url}, "source": {"table": "members"},
        "mapping": {"identifier": {"external_id": "USER_ID"}, "attributes": attributes},
        "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60}})


def test_a_backfill_of_a_synced_range_bills_nothing_unless_sent_whole(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = _members(warehouse, service, tmp_path, {"PLAN": "plan", "TIER": "tier"})
    first = _run(path, state)
    billed = _points(service)
    assert first["data_points_sent"] == billed == ROWS * 2  # a first run sends whole

    day = {"start": T0, "end": T0 + timedelta(days=1)}
    again = _run(path, state, "backfill", **day)
    assert _points(service) == billed
    assert (again["rows_read"], again["rows_unchanged"], again["data_points_sent"]) == (
        ROWS, ROWS, 0)
    resync = _run(path, state, "full_resync")
    assert _points(service) == billed and resync["data_points_saved"] == billed

    whole = _run(path, state, "backfill", **day, send_whole=True)
    assert whole["data_points_sent"] == ROWS * 2  # NULLs too: the object as read
    assert _points(service) == billed + ROWS * 2


def test_a_newly_mapped_column_bills_one_point_per_non_null_row(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    _run(_members(warehouse, service, tmp_path, {"PLAN": "plan"}), state)
    assert _points(service) == ROWS
    widened = _members(warehouse, service, tmp_path, {"PLAN": "plan", "TIER": "tier"},
                       create=False)
    resync = _run(widened, state, "full_resync")
    non_null = sum(1 for i in range(ROWS) if i % 3)
    assert _points(service) == ROWS + non_null
    assert resync["data_points_sent"] == non_null
    assert service.counters()["data_points_by_key"]["attributes"]["tier"] == non_null


# --- the schema guard -------------------------------------------------------------------------


def _guarded(path: Path, state: StateStore, accept: bool = False) -> dict[str, Any]:
    options = run_options("incremental", None, None, False, False,  # type: ignore[arg-type]
                          accept_schema=accept)
    record = sync_file(path, store=state, options=options).record
    assert record is not None
    return record


def test_a_mapped_column_whose_type_changed_stops_the_run_before_any_request(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = _members(warehouse, service, tmp_path, {"PLAN": "plan", "TIER": "tier"})
    _run(path, state)
    warehouse.execute("ALTER TABLE members ADD COLUMN note VARCHAR")
    warehouse.execute("UPDATE members SET updated_at = updated_at + INTERVAL '1 day'")
    warehouse.execute("ALTER TABLE members ALTER COLUMN plan TYPE INTEGER USING "
                      "CASE WHEN plan = 'pro' THEN 1 ELSE 0 END")
    requests = len(service.requests())
    for _ in range(2):  # refused again until accepted: the new schema is not recorded
        with pytest.raises(SchemaChanged, match=r"column plan was VARCHAR, is now INTEGER"):
            _guarded(path, state)
    assert len(service.requests()) == requests
    last = state.runs_newest_first("members", 0, 1)[0]
    assert last["job_status"] == "config_error" and "--accept-schema" in last["message"]

    accepted = _guarded(path, state, accept=True)
    assert accepted["job_status"] == "success" and accepted["rows_read"] == ROWS
    assert service.profile("m0000")["attributes"]["plan"] == 1  # type: ignore[index]
    assert _guarded(path, state)["job_status"] == "success"  # the new schema is the record's


def test_a_payload_key_whose_json_type_changed_stops_the_run(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    rows = [{"updated_at": T0 + timedelta(seconds=i), "external_id": f"u{i}",
             "payload": json.dumps({"age": 30 + i, "plan": "free"})} for i in range(20)]
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    _run(path, state)
    warehouse.execute("UPDATE users_sync SET updated_at = updated_at + INTERVAL '1 hour', "
                      "payload = :p", p=json.dumps({"age": "thirty", "plan": "free"}))
    requests = len(service.requests())
    with pytest.raises(SchemaChanged, match="payload key 'age' was number, is now string"):
        _guarded(path, state)
    assert len(service.requests()) == requests
    assert _guarded(path, state, accept=True)["rows_synced"] == 20
