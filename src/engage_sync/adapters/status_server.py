"""`engage-sync status-server`: the service's job sync status endpoint, served from engage-sync's
state database, so tools written for the service's endpoint work against engage-sync unchanged.

`GET /cdi/integrations/{integration_id}/job_sync_status[?cursor=C]` answers as the service does
(spec: "GET /cdi/integrations/{integration_id}/job_sync_status" and "Errors" item 3):

- 200 `{"results": [...], "message": "success"}`, 10 records a page, newest first, each record
  holding the service's six fields and the run's billed data points (sent, saved);
- `Link: <url?cursor=…>; rel="prev", <url?cursor=…>; rel="next"`, absent when the integration
  has 10 or fewer records, no `prev` on a call without cursor, no `next` on the last page;
- 400 `{"message": "Invalid cursor"}` and 400 `{"message": "Invalid integration ID"}` (an id
  that is neither an integration file of the config folder nor a name with recorded runs).

`GET /metrics`: the records as Prometheus counters per integration (rows synced, failed,
rejected, in doubt, unchanged; data points sent and saved; requests; runs by status) and the
time of the last successful run (`status.metrics`); a scrape sends the same token
(Prometheus' `authorization` setting).

Every request needs `Authorization: Bearer <token>`, the token being the value of
`ENGAGE_SYNC_STATUS_TOKEN` (401 otherwise). The server binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Callable
from pathlib import Path

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore
from engage_sync.status.metrics import render
from engage_sync.status.record import InvalidCursor, page

TOKEN_ENV = "ENGAGE_SYNC_STATUS_TOKEN"
PATH = "/cdi/integrations/{integration_id}/job_sync_status"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def _json(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def _message(text: str, status: int = 400) -> Response:
    return _json({"message": text}, status)


def token_from_env() -> str:
    """The bearer token the server accepts; raises ConfigError when the variable is unset."""
    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        raise ConfigError(
            f"set {TOKEN_ENV} to a secret of at least 16 characters; clients send it as "
            f"'Authorization: Bearer <token>' (generate one with: python -c "
            f"'import secrets; print(secrets.token_urlsafe(32))')")
    return token


def create_app(store: StateStore, token: str, config_dir: str | Path | None = None) -> Starlette:
    """The status app over one state store. `config_dir` names integrations that have no runs
    yet (they answer with an empty page instead of `Invalid integration ID`)."""
    expected = f"Bearer {token}".encode()
    folder = Path(config_dir) if config_dir else None

    def known(integration_id: str) -> bool:
        if not _ID.match(integration_id):
            return False
        if store.count_runs(integration_id) > 0:
            return True
        return folder is not None and any(
            (folder / f"{integration_id}{ext}").is_file() for ext in (".yaml", ".yml"))

    def refused(request: Request) -> Response | None:
        """401 unless the request carries the token."""
        given = request.headers.get("authorization", "").encode()
        if hmac.compare_digest(given, expected):
            return None
        return _json({"message": "Unauthorized: send 'Authorization: Bearer <token>'"},
                     401, headers={"WWW-Authenticate": "Bearer"})

    async def job_sync_status(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        integration_id = request.path_params["integration_id"]
        if not known(integration_id):
            return _message("Invalid integration ID")
        try:
            result = page(store, integration_id, request.query_params.get("cursor"),
                          extended=False)
        except InvalidCursor:
            return _message("Invalid cursor")
        base = str(request.url.replace(query=""))
        link = result.link_header(base)
        return _json(result.body(), headers={"Link": link} if link else None)

    async def metrics(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        return Response(render(store.run_totals()), media_type=METRICS_TYPE)

    return Starlette(routes=[Route(PATH, job_sync_status, methods=["GET"]),
                             Route("/metrics", metrics, methods=["GET"])])


def serve(store_factory: Callable[[], StateStore], *, host: str = "127.0.0.1", port: int = 8788,
          config_dir: str | None = None, log_level: str = "info") -> None:
    """Run the status server in the foreground until interrupted."""
    import uvicorn

    app = create_app(store_factory(), token_from_env(), config_dir)
    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="off")
