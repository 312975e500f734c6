"""dbt Cloud's job webhook on the status server (`POST /dbt/webhook`): a completed job runs the
integrations whose models the job built.

dbt Cloud signs each delivery: the `Authorization` header is the hex digest of HMAC-SHA256 of
the raw request body, keyed with the webhook's secret. The secret is read from the variable
ENGAGE_SYNC_DBT_WEBHOOK_SECRET (the route exists only when it is set). The models a run built
come from the run's own artifacts (`manifest.json`, `run_results.json`), fetched from dbt
Cloud's API (`DBT_CLOUD_URL`, default https://cloud.getdbt.com; token DBT_CLOUD_API_TOKEN).

Invariants:
- the signature is checked on the raw bytes before anything else is read, in constant time;
  a bad or missing one is 401 and nothing is fetched or started;
- a run is started for an integration only when its model was built successfully by this
  dbt run and none of its parents failed or was skipped in it; an errored job (the event
  `job.run.errored`, or a completed run whose status is not Success) starts nothing and says
  so; `job.run.started` is acknowledged and ignored;
- the runs are started all or none (`SyncStarter.start_all`): 429 while any of them is in
  progress, as `POST .../sync` answers, so dbt Cloud's retry of the delivery starts them all;
- no log line or answer holds the secret, the signature, the API token or a body's value.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from engage_sync.adapters import dbt_models
from engage_sync.adapters.failures import one_line
from engage_sync.adapters.sync_starter import SyncStarter
from engage_sync.errors import SyncError

log = logging.getLogger("engage_sync.status_server")

PATH = "/dbt/webhook"
SECRET_ENV = "ENGAGE_SYNC_DBT_WEBHOOK_SECRET"
URL_ENV = "DBT_CLOUD_URL"
TOKEN_ENV = "DBT_CLOUD_API_TOKEN"
DEFAULT_URL = "https://cloud.getdbt.com"
FETCH_TIMEOUT = 8.0  # dbt Cloud gives a delivery 10 s before it counts it failed

Artifacts = Callable[[str, str, str], Any]
"""(account id, run id, artifact name) → the artifact's JSON."""


def signature(secret: bytes, body: bytes) -> str:
    """What dbt Cloud sends in `Authorization` for `body`."""
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def cloud_artifacts(base_url: str, token: str) -> Artifacts:
    """The artifacts of a run from dbt Cloud's API v2."""
    def fetch(account: str, run: str, name: str) -> Any:
        url = f"{base_url.rstrip('/')}/api/v2/accounts/{account}/runs/{run}/artifacts/{name}"
        response = httpx.get(url, headers={"Authorization": f"Token {token}"},
                             timeout=FETCH_TIMEOUT)
        if response.status_code != 200:
            raise SyncError(f"dbt Cloud answered {response.status_code} to GET {name} of run "
                            f"{run}")
        return response.json()

    return fetch


@dataclass
class DbtWebhook:
    secret: bytes
    folder: Path
    starter: SyncStarter
    artifacts: Artifacts

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        given = request.headers.get("authorization", "").strip().lower()
        if not given or not hmac.compare_digest(given.encode(),
                                                signature(self.secret, body).encode()):
            log.warning("dbt webhook refused: %s signature", "no" if not given else "a bad")
            return _json({"message": "Unauthorized: bad or missing dbt Cloud signature"}, 401)
        try:
            event = orjson.loads(body)
            data = event.get("data") or {}
            kind, status = str(event.get("eventType") or ""), str(data.get("runStatus") or "")
            account, run = str(event["accountId"]), str(data["runId"])
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
            return _json({"message": "not a dbt Cloud job event"}, 400)
        job = f"dbt Cloud job {data.get('jobId', '?')} run {run}"
        if kind == "job.run.started":
            return _json({"message": f"ignored: {kind}"}, 200)
        if kind == "job.run.errored" or status.lower() != "success":
            log.warning("%s errored (%s): no integration started", job, status or kind)
            return _json({"message": f"{job} errored: no integration started"}, 200)
        try:
            runs = await run_in_threadpool(self._chosen, account, run)
        except (SyncError, httpx.HTTPError, ValueError) as exc:
            log.warning("%s: no integration started: %s", job, one_line(exc))
            return _json({"message": f"{job}: no integration started: {one_line(exc)}"}, 502)
        if not runs:
            return _json({"message": f"{job} built no model an integration reads"}, 200)
        if not self.starter.start_all(runs):
            return _json({"message": "Another job is in progress"}, 429)
        names = [name for name, _ in runs]
        log.info("%s completed: started %s", job, ", ".join(names))
        return _json({"message": "success", "started": names}, 202)

    def _chosen(self, account: str, run: str) -> list[tuple[str, Path]]:
        """The integrations whose model this run built, none of its parents held back."""
        manifest = dbt_models.manifest_from(self.artifacts(account, run, "manifest.json"),
                                            f"run {run}'s manifest.json")
        results = dbt_models.run_results_from(self.artifacts(account, run, "run_results.json"),
                                              f"run {run}'s run_results.json")
        built = results.built()
        return [(p.name, p.path) for p in dbt_models.place_folder(self.folder, manifest)
                if p.unique_id in built
                and dbt_models.skip_reason(p, manifest, results) is None]


def from_env(folder: Path | None, starter: SyncStarter) -> DbtWebhook | None:
    """The webhook when its secret is set in the environment and there is a config folder."""
    secret = os.environ.get(SECRET_ENV, "")
    if not secret or folder is None:
        return None
    return DbtWebhook(secret.encode(), folder, starter, cloud_artifacts(
        os.environ.get(URL_ENV, DEFAULT_URL), os.environ.get(TOKEN_ENV, "")))


def _json(body: object, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")
