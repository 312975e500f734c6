"""No API key, warehouse password or payload value in logs, errors or status records."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from engage_sync.status.record import page
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    integration_body,
    table_integration,
    users_table,
    write_integration,
)

SECRET_VALUE = "s3cr3t-payload-value"


def _everything_said(caplog: pytest.LogCaptureFixture, state: StateStore, name: str) -> str:
    records = page(state, name, None).results
    errors = state.errors(name, limit=1000)
    return "\n".join([caplog.text, json.dumps(records, default=str),
                      json.dumps(errors, default=str)])


def test_a_run_says_nothing_of_the_key_or_the_payload(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, sandbox_key: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    users_table(warehouse)
    warehouse.insert("users_sync", [
        {"updated_at": T0, "external_id": "u1", "payload": json.dumps({"note": SECRET_VALUE})},
        {"updated_at": T0, "external_id": "u2",
         "payload": json.dumps({"$bad": SECRET_VALUE})},  # rejected: reason names the key only
    ])
    path = write_integration(tmp_path, "users", integration_body(
        warehouse, service, "attributes", "users_sync"))
    service.faults([{"path": "/users/track", "action": "503", "nth": [1]}])
    record = sync_file(path, store=state).record
    assert record is not None and record["rows_synced"] == 1 and record["rows_rejected"] == 1
    said = _everything_said(caplog, state, "users")
    assert sandbox_key not in said
    assert SECRET_VALUE not in said


def test_a_refused_key_is_not_repeated_in_the_error(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-key-0123456789"
    monkeypatch.setenv("ENGAGE_API_KEY", wrong)
    path = table_integration(warehouse, service, tmp_path, "attributes",
                             [{"updated_at": T0, "external_id": "u1", "payload": "{}"}])
    with pytest.raises(Exception) as raised:
        sync_file(path, store=state)
    assert wrong not in str(raised.value)
    records = page(state, "users", None).results
    assert records[0]["job_status"] == "error"
    assert "401" in records[0]["message"] or "Invalid API Key" in records[0]["message"]
    assert wrong not in _everything_said(caplog, state, "users")
