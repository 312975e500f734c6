"""The status server's `GET /integrations/{integration_id}/trace?key=K`: what `engage-sync
trace` prints with `--json` (the same `status/trace.py` functions), behind the server's token.

Answers: 200 with the list of traced runs (empty when no traced run read the row); 400
`Invalid integration ID` as job_sync_status answers it; 400 `key is required`; 401 without the
token (the server's own check, handed in). Never a value of the row: the trace holds none.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sync.state.store import StateStore
from engage_sync.status.trace import as_json, traced

PATH = "/integrations/{integration_id}/trace"


def trace_route(store: StateStore, refused: Callable[[Request], Response | None],
                known: Callable[[str], bool]) -> Route:
    """The route, given the server's token check (`refused`: None lets a request through)
    and its test of an integration id (`known`)."""

    def trace(request: Request) -> Response:  # plain: Starlette runs it in its thread pool
        if (no := refused(request)) is not None:
            return no
        integration_id = request.path_params["integration_id"]
        if not known(integration_id):
            return _json({"message": "Invalid integration ID"}, 400)
        key = request.query_params.get("key")
        if not key:
            return _json({"message": "key is required: ?key=<row key>"}, 400)
        return _json(as_json(traced(store, integration_id, key)), 200)

    return Route(PATH, trace, methods=["GET"])


def _json(body: object, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")
