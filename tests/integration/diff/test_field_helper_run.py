"""A first diffed run with its field helper, end to end against the sandbox over loopback: a
user whose later object ended in doubt is left unrecorded, and a run killed after its helper
took over leaves no user recorded older than the last object the service acknowledged to it;
so the next run sends what it reads back, whatever the service kept."""

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
    killed_after_the_helper_took_over,
    resume_cli,
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
                             service={"max_in_flight": 1, "retry_deadline_seconds": 2},
                             superseded_rows="send")  # two objects of u00005, not their merge
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


def test_a_killed_first_run_leaves_no_user_recorded_older_than_the_service_holds(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run digests its first batch itself, then its helper takes over; u00000-u00149
    are read "old", then "new" (the run's own users among them: u00000-u00099). The run is
    killed well after those were settled (a settle takes 32 requests), so the helper's
    records are lost; the resumed run ends it. The service holds "new": a later row back at
    "old" must be sent. Before, the run's log kept u00000 at "old" and the row was not sent."""
    path, state_url = killed_after_the_helper_took_over(
        warehouse, service, sandbox_key, tmp_path, monkeypatch)
    resume_cli(path, state_url, sandbox_key)
    assert service.profile("u00000")["attributes"]["plan"] == "new"  # type: ignore[index]
    warehouse.insert("users_sync", user_rows(1, at=T0 + timedelta(hours=1), plan="old"))
    warehouse.engine.dispose()
    assert resume_cli(path, state_url, sandbox_key)["rows_synced"] == 1
    assert service.profile("u00000")["attributes"]["plan"] == "old"  # type: ignore[index]
