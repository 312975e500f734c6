"""The alerts of a flow run are Prefect events on the Prefect server (so an automation can
notify on them): the webhook test's scenario run as flows, read back through the events API."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sandbox.web.server import SandboxHandle
from engage_sync.adapters.alert_delivery import resource_id
from engage_sync.adapters.flows import sync_integration
from tests.integration.alert_receiver import TOKEN, play
from tests.integration.conftest import Warehouse, users_table, write_integration


def _alert_events(name: str, since: datetime) -> list[dict[str, object]]:
    from prefect.client.orchestration import get_client
    from prefect.events.filters import (
        EventFilter,
        EventNameFilter,
        EventOccurredFilter,
        EventResourceFilter,
    )

    query = EventFilter(occurred=EventOccurredFilter(since=since),
                        event=EventNameFilter(prefix=["engage-sync.alert."]),
                        resource=EventResourceFilter(id=[resource_id(name)]))
    with get_client(sync_client=True) as client:
        page = client.read_events(filter=query, limit=50)
    return sorted((e.model_dump(mode="json") for e in page.events),
                  key=lambda e: str(e["occurred"]))


def test_alerts_are_prefect_events_on_the_server(
    prefect_api: str, sandbox: SandboxHandle, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sandbox.reset()
    monkeypatch.setenv("ENGAGE_API_KEY", sandbox.api_key)
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    users_table(wh)
    name = f"alerting_{secrets.token_hex(4)}"  # the session's server holds other tests' events
    path = write_integration(tmp_path, name, {
        "kind": "attributes", "warehouse": {"url": url}, "source": {"table": "users_sync"},
        "service": {"base_url": sandbox.base_url, "retry_deadline_seconds": 60},
        "alerts": {"factor": 5}})
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    since = datetime.now(UTC)

    def seen(count: int) -> list[tuple[str, str]]:
        deadline = time.monotonic() + 60  # the server writes events as they stream in
        while True:
            events = _alert_events(name, since)
            if len(events) >= count or time.monotonic() > deadline:
                return [tuple(str(e["event"]).split(".")[2:4]) for e in events]  # type: ignore[misc]
            time.sleep(0.5)

    def sync() -> None:
        asyncio.run(sync_integration(str(path), state_url=state_url, return_state=True))

    play(wh, sync, seen)
    events = _alert_events(name, since)
    first = events[0]
    assert first["event"] == "engage-sync.alert.volume.raised"
    payload = first["payload"]
    assert isinstance(payload, dict)
    assert payload["integration"] == name and payload["figures"]["rows_read"] == 100
    assert TOKEN not in json.dumps(events)  # no row's value in any event
