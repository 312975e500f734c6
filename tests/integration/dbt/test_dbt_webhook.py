"""dbt Cloud's job webhook on the status server: the signature (HMAC-SHA256 of the raw body,
hex, in `Authorization`), a completed job's built models run their integrations, 429 while
they run, an errored job runs nothing; a stand-in for dbt Cloud's artifacts API and the
sandbox, both over loopback, and the checked-in dbt project's manifest."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engage_sync.adapters.dbt_webhook import signature
from engage_sync.adapters.status_server import create_app
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, served
from tests.integration.dbt.test_dbt_select import MANIFEST, RUN_RESULTS, folder_of, sent_attributes

TOKEN = "status-token-0123456789abcdef"
SECRET = "whsec-shared-0123456789-abcdef"
CLOUD_TOKEN = "dbtc-api-token-0123456789"


def built_users_only() -> dict[str, Any]:
    """run_results.json of a job that built `+braze_users` (and its tests) successfully."""
    raw = json.loads(RUN_RESULTS.read_text())
    good = copy.deepcopy(raw)
    good["results"] = [r for r in raw["results"]
                       if r["unique_id"] in ("model.shop.stg_users", "model.shop.braze_users")
                       or ("braze_users" in r["unique_id"] and r["unique_id"].startswith("test"))]
    for r in good["results"]:
        r["status"] = "pass" if r["unique_id"].startswith("test") else "success"
    return good


@pytest.fixture
def cloud() -> Any:
    """dbt Cloud's artifacts endpoint; the tokens it was called with."""
    seen: list[str] = []
    artifacts = {"manifest.json": json.loads(MANIFEST.read_text()),
                 "run_results.json": built_users_only()}

    def artifact(request: Request) -> JSONResponse:
        seen.append(request.headers.get("authorization", ""))
        return JSONResponse(artifacts[request.path_params["name"]])

    app = Starlette(routes=[Route("/api/v2/accounts/{account}/runs/{run}/artifacts/{name}",
                                  artifact)])
    with served(app, "unused") as client:
        yield str(client.base_url), seen


def event(kind: str = "job.run.completed", status: str = "Success") -> bytes:
    return orjson.dumps({"accountId": 1, "eventId": "wev_1", "eventType": kind,
                         "webhookName": "engage-sync",
                         "data": {"jobId": "123", "runId": "456", "runStatus": status}})


def post(client: httpx.Client, body: bytes, sig: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Authorization": sig or ""}
    return client.post("/dbt/webhook", content=body, headers=headers)


def test_webhook_signed_runs_built_models_once_refuses_the_rest(
        tmp_path: Path, service: Service, state: StateStore, cloud: Any,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    url, seen = cloud
    monkeypatch.setenv("ENGAGE_SYNC_DBT_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("DBT_CLOUD_URL", url)
    monkeypatch.setenv("DBT_CLOUD_API_TOKEN", CLOUD_TOKEN)
    folder = folder_of(tmp_path, service)
    service.faults([{"path": "/users/track", "action": "delay", "nth": [1],
                     "delay_seconds": 2}])  # the run is still in flight at the second call
    app = create_app(state, TOKEN, folder)
    body = event()
    good = signature(SECRET.encode(), body)
    with served(app, TOKEN) as client:
        assert post(client, body, None).status_code == 401
        assert post(client, body, "0" * 64).status_code == 401
        assert post(client, body + b" ", good).status_code == 401  # the body signed, not JSON
        assert seen == []  # nothing fetched before the signature holds
        first = post(client, body, good)
        assert (first.status_code, first.json()) == (
            202, {"message": "success", "started": ["users"]})
        again = post(client, body, good)
        assert (again.status_code, again.json()) == (429, {"message": "Another job is in progress"})
        app.state.starter.join(60)
        errored = event("job.run.errored", "Errored")
        answer = post(client, errored, signature(SECRET.encode(), errored))
        assert answer.status_code == 200 and "errored: no integration started" in answer.text
        failed = event("job.run.completed", "Error")
        answer = post(client, failed, signature(SECRET.encode(), failed))
        assert answer.status_code == 200 and "no integration started" in answer.text
    assert (state.count_runs("users"), state.count_runs("orders"), state.count_runs("crm")) \
        == (1, 0, 0)
    assert sent_attributes(service) == {"plan"}
    assert seen and all(s == f"Token {CLOUD_TOKEN}" for s in seen)
    out, err = capfd.readouterr()
    logs = caplog.text + out + err
    assert "dbt webhook refused" in caplog.text
    for secret in (SECRET, good, CLOUD_TOKEN, TOKEN):
        assert secret not in logs
