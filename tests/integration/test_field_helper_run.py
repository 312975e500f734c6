"""A first diffed run with its field helper, end to end against the sandbox over loopback: a
user whose later object ended in doubt is left unrecorded, so the next run sends it whole,
whatever the service kept."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.field_codec import user_key
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    field_records,
    table_integration,
    user_rows,
)


def test_a_user_whose_later_object_ended_in_doubt_is_sent_whole_by_the_next_run(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """u00005 is read twice in the first run: "free" (acknowledged), then "gold" in the last
    request, which the service processes every time and whose answers are all lost (in
    doubt once the retries' deadline passes).
    The service holds "gold". The next run reads u00005 at "free" again: it must send it."""
    monkeypatch.setenv("ENGAGE_SYNC_FIELD_HELPER_AFTER", "0")  # the helper from the start
    rows = user_rows(150)
    gold = {"updated_at": T0 + timedelta(hours=1), "external_id": "u00005",
            "payload": json.dumps({"plan": "gold", "n": 5})}
    path = table_integration(warehouse, service, tmp_path, "attributes", [*rows, gold],
                             service={"max_in_flight": 1, "retry_deadline_seconds": 2})
    service.faults([{"path": "/users/track", "action": "drop", "nth": list(range(3, 40))}])
    first = sync_file(path, store=state).record
    assert first is not None and (first["rows_synced"], first["rows_in_doubt"]) == (150, 1)
    profile = service.profile("u00005")
    assert profile is not None and profile["attributes"]["plan"] == "gold"  # processed, answer lost
    record = field_records(state, "users")
    assert user_key("external_id:u00006") in record
    assert user_key("external_id:u00005") not in record  # the helper forgot it
    service.faults([])
    back = {"updated_at": T0 + timedelta(hours=2), "external_id": "u00005",
            "payload": json.dumps({"plan": "free", "n": 5})}
    warehouse.insert("users_sync", [back])
    second = sync_file(path, store=state).record
    assert second is not None and second["rows_synced"] == 1
    profile = service.profile("u00005")
    assert profile is not None and profile["attributes"]["plan"] == "free"
