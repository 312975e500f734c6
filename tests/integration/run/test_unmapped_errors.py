"""An accepted answer whose errors name no item keeps them: in the run's
errors with the request they came from, counted in the record, listed by `engage-sync errors`
and in the rejects artifact. The sandbox is real; a transport between the client and the
sandbox adds such an error to the answer of the first request, as the service may."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from engage_sync.adapters import resources
from engage_sync.adapters.wiring import sync_file
from engage_sync.cli import main as cli
from engage_sync.config.integration import Integration
from engage_sync.state.store import StateStore
from engage_sync.status.record import run_errors
from tests.integration.conftest import Service, Warehouse, event_rows, table_integration

STRAY = "an internal error the service could not attribute"


def _with_stray_error(real: httpx.BaseTransport) -> httpx.MockTransport:
    answered = {"n": 0}

    def handle(request: httpx.Request) -> httpx.Response:
        response = real.handle_request(request)
        body = response.read()
        answered["n"] += request.method == "POST"  # not the run's key check (a GET)
        if answered["n"] != 1 or response.status_code != 201:
            return httpx.Response(response.status_code, headers=response.headers, content=body)
        data: dict[str, Any] = json.loads(body)
        data["errors"] = [*data.get("errors", []), {"type": STRAY}]
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(201, headers=headers, json=data)

    return httpx.MockTransport(handle)


def test_errors_naming_no_item_are_kept_counted_and_listed(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    def transport(integration: Integration) -> httpx.BaseTransport:
        return _with_stray_error(httpx.HTTPTransport())

    monkeypatch.setattr(resources, "http_transport", transport)
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(150),
                             service={"max_in_flight": 1})
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["rows_synced"], record["errors_unmapped"]) == (150, 1), record
    listing = run_errors(state, record["run_id"])  # what the rejects artifact shows
    assert listing == [{"kind": "unmapped", "row_key": "request 1", "reason": STRAY}]
    assert cli.main(["errors", "events", "--state-url", str(state.engine.url)]) == 0
    shown = capsys.readouterr().out
    assert "unmapped" in shown and "request 1" in shown and STRAY in shown
