"""The control plane under ``/_sandbox/`` (no auth): reset, request log, profiles, counters,
faults, health. Modelled on moto's server-mode control endpoints.

Invariants: the control plane is never logged, counted, rate limited or faulted; it reads the
same :class:`~engage_sandbox.state.state.SandboxState` the API handlers write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sandbox.state.faults import FaultError, parse_rules

if TYPE_CHECKING:
    from engage_sandbox.state.state import SandboxState

def json_response(body: Any, status: int = 200) -> Response:
    """A JSON response serialised with orjson."""
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _state(request: Request) -> SandboxState:
    state: SandboxState = request.app.state.sandbox
    return state


async def health(request: Request) -> Response:
    """GET /_sandbox/health → ``{"status": "ok", "lean": bool}``."""
    return json_response({"status": "ok", "lean": _state(request).settings.lean})


async def reset(request: Request) -> Response:
    """POST /_sandbox/reset: clear store, log, counters, faults and rate windows."""
    _state(request).reset()
    return json_response({"message": "reset"})


async def requests_log(request: Request) -> Response:
    """GET /_sandbox/requests[?path=/users/track] → ``{"requests": [entry, ...]}``."""
    path = request.query_params.get("path")
    return json_response({"requests": _state(request).log.entries(path)})


async def profiles(request: Request) -> Response:
    """GET /_sandbox/profiles[?external_id=|email=|phone=|platform_id=|alias_name=&alias_label=]

    With an identifier: the profile (404 ``{"message": "profile not found"}`` when none);
    without: ``{"profiles": [...]}``.
    """
    store = _state(request).store
    q = request.query_params
    if "alias_name" in q or "alias_label" in q:
        alias = {"alias_name": q.get("alias_name", ""), "alias_label": q.get("alias_label", "")}
        found = store.find(user_alias=alias)
    elif any(k in q for k in ("external_id", "email", "phone", "platform_id")):
        found = store.find(
            external_id=q.get("external_id"),
            email=q.get("email"),
            phone=q.get("phone"),
            platform_id=q.get("platform_id"),
        )
    else:
        return json_response({"profiles": [p.to_json() for p in store.all()]})
    if found is None:
        return json_response({"message": "profile not found"}, 404)
    return json_response(found.to_json())


async def counters(request: Request) -> Response:
    """GET /_sandbox/counters (shape: :meth:`engage_sandbox.state.counters.Counters.to_json`)."""
    return json_response(_state(request).counters.to_json())


async def faults(request: Request) -> Response:
    """GET lists the rules; POST replaces them (a list, or one rule); DELETE clears them.

    Request numbering (``nth``) is not restarted by POST or DELETE, only by reset.
    """
    book = _state(request).faults
    if request.method == "POST":
        try:
            book.rules = parse_rules(orjson.loads(await request.body()))
        except orjson.JSONDecodeError:
            return json_response({"message": "faults must be JSON"}, 400)
        except FaultError as exc:
            return json_response({"message": str(exc)}, 400)
    elif request.method == "DELETE":
        book.rules = []
    return json_response({"faults": [rule.to_json() for rule in book.rules]})


def routes() -> list[Route]:
    """The control-plane routes."""
    return [
        Route("/_sandbox/health", health, methods=["GET"]),
        Route("/_sandbox/reset", reset, methods=["POST"]),
        Route("/_sandbox/requests", requests_log, methods=["GET"]),
        Route("/_sandbox/profiles", profiles, methods=["GET"]),
        Route("/_sandbox/counters", counters, methods=["GET"]),
        Route("/_sandbox/faults", faults, methods=["GET", "POST", "DELETE"]),
    ]
