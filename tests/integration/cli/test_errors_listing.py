"""The errors listing has a header and shows a NULL key part plainly; a run
that synced none of its rows says why and what to do, in its record and in its alert."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.cli import main as cli
from engage_sync.state.store import StateStore
from engage_sync.status.record import alert_reason
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    event_rows,
    events_table,
    integration_body,
    users_table,
    write_integration,
)


def test_all_rows_rejected(warehouse: Warehouse, service: Service, state: StateStore,
                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    users_table(warehouse)
    warehouse.insert("users_sync", [
        {"updated_at": T0, "external_id": None, "payload": "{}"},
        {"updated_at": T0, "external_id": "u1", "payload": "{bad"},
        {"updated_at": T0, "external_id": "u2", "payload": json.dumps({"$x": 1})}])
    path = write_integration(tmp_path, "users", integration_body(
        warehouse, service, "attributes", "users_sync"))
    record = sync_file(path, store=state).record
    assert record is not None
    assert record["job_status"] == "error" and record["rows_rejected"] == 3
    assert record["message"].startswith("all 3 rows read were rejected before sending; "
                                         "`engage-sync errors users` lists every row")
    reason = alert_reason(record, None)  # what fails the flow run
    assert reason is not None and "see the run logs" not in reason
    assert "rejected before sending" in reason
    assert cli.main(["errors", "users", "--state-url", str(state.engine.url)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RECORDED", "(UTC)", "KIND", "ROW", "KEY", "RETRY", "REASON"]
    assert len(lines) == 4
    at = lines[0].index("ROW KEY")
    assert [line[at:].startswith("(no value) ") for line in lines[1:]].count(True) == 1, lines


def test_all_rows_in_doubt(warehouse: Warehouse, service: Service, state: StateStore,
                           tmp_path: Path) -> None:
    events_table(warehouse)
    warehouse.insert("events_sync", event_rows(5))
    path = write_integration(tmp_path, "events", integration_body(
        warehouse, service, "events", "events_sync", in_doubt="skip"))
    service.faults([{"path": "/users/track", "action": "500", "nth": [1], "process": True}])
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["job_status"], record["rows_in_doubt"]) == ("error", 5), record
    assert record["message"].startswith("all 5 rows read are in doubt")
    reason = alert_reason(record, None)
    assert reason is not None and "see the run logs" not in reason
