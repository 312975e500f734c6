"""`changes: snapshot` on Snowflake, through its real connector against the emulator (fakesnow):
a model of 5,000 users × 4 attributes compared in the warehouse with its snapshot, counted at
the sandbox: the first run sends 5,000 objects, an unchanged re-run no request, one attribute
changed for 100 users bills exactly 100 points."""

from __future__ import annotations

from pathlib import Path

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, write_integration
from tests.snowflake_emulator import PASSWORD, Emulator

USERS = 5000
ATTRIBUTES = ("PLAN", "CITY", "SCORE", "VIP")


def test_a_snapshot_model_on_snowflake_sends_only_what_changed(
        snowflake: Emulator, service: Service, state: StateStore, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNOWFLAKE_PASSWORD", PASSWORD)
    snowflake.execute(
        "CREATE OR REPLACE TABLE TRAITS (USER_ID VARCHAR, PLAN VARCHAR, CITY VARCHAR, "
        "SCORE INTEGER, VIP BOOLEAN)",
        "INSERT INTO TRAITS SELECT 'u' || i::VARCHAR, 'free', "
        "CASE WHEN i % 2 = 0 THEN 'Lyon' ELSE 'Oslo' END, i, i % 7 = 0 "
        f"FROM (SELECT seq4() AS i FROM TABLE(GENERATOR(ROWCOUNT => {USERS})))")
    args = {**snowflake.connect_args(), "password": "${SNOWFLAKE_PASSWORD}"}
    path = write_integration(tmp_path, "traits_sf", {
        "kind": "attributes", "changes": "snapshot",
        "warehouse": {"url": snowflake.url, "connect_args": args},
        "source": {"table": "TRAITS"},
        "mapping": {"identifier": {"external_id": "USER_ID"},
                    "attributes": {a: a.lower() for a in ATTRIBUTES}},
        "service": {"base_url": service.base_url, "retry_deadline_seconds": 60}})

    first = sync_file(path, store=state).record
    assert first is not None and first["job_status"] == "success", first
    assert service.counters()["attributes_processed"] == USERS
    assert service.counters()["data_points"] == USERS * len(ATTRIBUTES)
    requests = len(service.requests())

    again = sync_file(path, store=state).record
    assert again is not None and again["job_status"] == "success", again
    assert len(service.requests()) == requests and again["rows_read"] == 0

    snowflake.execute("UPDATE TRAITS SET PLAN = 'gold' WHERE SCORE < 100")
    changed = sync_file(path, store=state).record
    assert changed is not None and changed["job_status"] == "success", changed
    assert service.counters()["data_points"] == USERS * len(ATTRIBUTES) + 100
    assert (changed["rows_synced"], changed["data_points_sent"]) == (100, 100)
    assert service.profile("u7")["attributes"]["plan"] == "gold"  # type: ignore[index]
