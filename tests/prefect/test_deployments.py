"""Deployments served by `deployments/serve.py` to a real Prefect server on loopback: runs
triggered with parameters, backfills of one run per chunk, alerts and artifacts."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment

from engage_sync.adapters.flows import SyncAlert, sync_integration
from engage_sync.adapters.wiring import open_state
from engage_sync.cli import backfill
from tests.integration.conftest import T0, write_integration
from tests.prefect.conftest import EVENTS, USERS, Served

DAY = timedelta(days=1)


def trigger(name: str, **parameters: Any) -> Any:
    """A run of a served deployment, as `prefect deployment run NAME --param k=v` makes it."""
    run = run_deployment(name, parameters=parameters, timeout=120, poll_interval=1,
                         as_subflow=False)
    assert run.state is not None
    return run


def artifacts(api: str, flow_run_id: UUID) -> dict[str, Any]:
    response = httpx.post(f"{api}/artifacts/filter", json={
        "artifacts": {"flow_run_id": {"any_": [str(flow_run_id)]}}, "limit": 10, "offset": 0,
        "sort": "UPDATED_DESC"})
    response.raise_for_status()
    return {a["key"]: json.loads(a["data"]) for a in response.json()}


def test_a_served_deployment_triggered_with_parameters_runs_and_records_status(
    served: Served, prefect_api: str
) -> None:
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("engage-sync/users")
    schema = deployment.parameter_openapi_schema or {}
    assert schema["properties"]["mode"]["enum"] == ["incremental", "backfill", "full_resync"]
    assert {s.schedule.cron: s.parameters for s in deployment.schedules} == {  # type: ignore[union-attr]
        "0 0 1 1 *": {}, "0 3 1 1 *": {"mode": "full_resync"}}

    run = trigger("engage-sync/users", mode="full_resync")
    assert run.state.is_completed(), run.state.message
    records = served.state.runs_newest_first("users", 0, 5)
    assert [(r["mode"], r["rows_synced"], r["rows_rejected"]) for r in records] == [
        ("full_resync", USERS, 1)]

    arts = artifacts(prefect_api, run.id)
    status = arts["sync-status-users"][0]
    assert (status["job_status"], status["rows_synced"], status["mode"]) == (
        "partial", USERS, "full_resync")
    counted = httpx.get(f"{served.sandbox.control_url}/counters").json()
    billed = sum(counted["data_points_by_key"]["attributes"].values())
    assert status["data_points_sent"] == billed == 2 * USERS  # plan and n per user
    assert status["data_points_saved"] == 0  # a full resync sends every field
    assert arts["sync-rejects-users"] == [
        {"kind": "rejected", "row_key": "u-bad", "reason": "PAYLOAD is not valid JSON"}]

    dry = trigger("engage-sync/users", mode="full_resync", dry_run=True)
    assert dry.state.is_completed()
    assert served.state.count_runs("users") == 1  # a dry run records nothing


def test_a_backfill_creates_one_run_per_chunk_once_and_sends_no_event_twice(
    served: Served, prefect_api: str
) -> None:
    incremental = trigger("engage-sync/events")
    assert incremental.state.is_completed(), incremental.state.message
    cursor = served.state.cursor("events")
    assert cursor is not None
    chunks = backfill.plan(T0.replace(tzinfo=backfill.UTC),
                           T0.replace(tzinfo=backfill.UTC) + 3 * DAY, "1d")
    lines: list[str] = []

    first = backfill.run_backfill("events", chunks, deployment="engage-sync/events",
                                  poll=0.5, report=lines.append)
    assert (first.created, first.done, first.stopped) == (3, 3, None)
    assert "3/3 chunks done" in lines[-1]
    again = backfill.run_backfill("events", chunks, deployment="engage-sync/events", poll=0.5,
                                  report=lines.append)
    assert (again.created, again.done) == (0, 3)
    assert [c.flow_run_id for c in again.chunks] == [c.flow_run_id for c in first.chunks]

    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name("engage-sync/events")
        runs = backfill._existing_runs(client, dep.id, backfill.run_tag(
            "events", backfill.options_hash(False, None)))
    assert len(runs) == 3
    assert served.state.cursor("events") == cursor  # the incremental cursor did not move
    backfills = [r for r in served.state.runs_newest_first("events", 0, 10)
                 if r["mode"] == "backfill"]
    assert len(backfills) == 3 and all(r["job_status"] == "success" for r in backfills)
    ids = Counter(served.event_ids())
    assert len(ids) == EVENTS and max(ids.values()) == 1


def test_an_interrupted_backfill_resumes_where_it_stopped(served: Served) -> None:
    chunks = backfill.plan(T0.replace(tzinfo=backfill.UTC),
                           T0.replace(tzinfo=backfill.UTC) + 3 * DAY, "1d")
    cursor = served.state.cursor("users")

    def interrupt(result: backfill.ChunkResult) -> None:
        raise KeyboardInterrupt  # Ctrl-C after the first chunk

    # sent whole: rows synced count every row, whatever earlier tests of the module synced
    with pytest.raises(KeyboardInterrupt):
        backfill.run_backfill("users", chunks, deployment="engage-sync/users", poll=0.5,
                              report=lambda _: None, on_chunk=interrupt, send_whole=True)
    resumed = backfill.run_backfill("users", chunks, deployment="engage-sync/users",
                                    poll=0.5, report=lambda _: None, send_whole=True)
    assert (resumed.created, resumed.done, resumed.stopped) == (2, 3, None)
    assert [c.created for c in resumed.chunks] == [False, True, True]
    # every valid row once, the rows at the midnights between chunks included
    assert [c.rows_synced for c in resumed.chunks] == [24, 24, 24]
    assert resumed.rows_synced == USERS
    assert served.state.cursor("users") == cursor


def test_a_backfill_names_a_missing_deployment(prefect_api: str) -> None:
    with pytest.raises(backfill.SyncError, match="no deployment 'engage-sync/nobody'"):
        backfill.run_backfill("nobody", [], deployment="engage-sync/nobody")


def test_alerts_fail_the_flow_run_and_the_status_record_says_why(
    prefect_api: str, served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGAGE_API_KEY", served.sandbox.api_key)
    users = (served.folder / "users.yaml").read_text()
    strict = tmp_path / "strict_users.yaml"
    strict.write_text(users + "failed_rows_alert_share: 0.001\n")
    state_url = f"sqlite:///{tmp_path / 'state.db'}"

    state = asyncio.run(sync_integration(str(strict), state_url=state_url, return_state=True))
    assert state.is_failed()
    assert "1 of 73 rows failed (1.4%), above the alert threshold" in str(state.message)
    record = open_state(state_url).runs_newest_first("strict_users", 0, 1)[0]
    assert record["job_status"] == "partial"
    assert "above the alert threshold" in record["message"]

    broken = write_integration(tmp_path, "broken", {"kind": "attributes",
                                                    "source": {"table": "t"}})
    broken.write_text(broken.read_text() + "no_such_key: 1\n")
    with pytest.raises(SyncAlert, match="no_such_key"):
        asyncio.run(sync_integration(str(broken), state_url=state_url))
    last = open_state(state_url).runs_newest_first("broken", 0, 1)[0]
    assert last["job_status"] == "config_error" and "no_such_key" in last["message"]
