"""API-triggered messaging: Canvas sends and campaign schedules, and the dispatch log endpoint.

Nothing is really sent: each accepted request becomes a `Dispatch` in the sandbox's dispatch
log (`GET /_sandbox/dispatches`), naming who would have received it with which properties.

Invariants:
- a request is validated whole (`messaging_validation`) before any side effect: a 400 changes
  no profile and logs no dispatch;
- a Canvas that is paused, stopped or archived sends nothing and changes no profile; the
  reply is still 201 with a `dispatch_id` and a `notice`.

Contract choices where the interface says "not shown" (for the request rules see
`messaging_validation`, for audiences `dispatches`):
- errors are `400 {"message": ...}`; an unknown `canvas_id` / `campaign_id` is
  `400 Invalid canvas_id` / `400 Invalid campaign_id`;
- `/campaigns/trigger/schedule/create` answers 201;
- the archived notice reads "The Canvas is archived. ..." like the paused one.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sandbox.handlers.messaging_validation import (
    Invalid,
    check_campaign_schedule,
    check_canvas_send,
)
from engage_sandbox.state.dashboard_seed import seed_of
from engage_sandbox.state.dispatches import Dispatch, deliver, dispatches_of

NOTICES = {
    "paused": "The Canvas is paused. Resume the Canvas to ensure trigger requests will take "
    "effect.",
    "stopped": "The Canvas is stopped. Resume the Canvas to ensure trigger requests will take "
    "effect.",
    "archived": "The Canvas is archived. Unarchive the Canvas to ensure trigger requests will "
    "take effect.",
}


async def list_dispatches(request: Request) -> Response:
    """GET /_sandbox/dispatches[?dispatch_id=...]: the dispatch log as JSON, oldest first."""
    wanted = request.query_params.get("dispatch_id")
    items = [asdict(d) for d in dispatches_of(request.app) if wanted in (None, d.dispatch_id)]
    return _json({"dispatches": items}, 200)


def _json(body: Any, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


async def canvas_trigger_send(request: Request) -> Response:
    """POST /canvas/trigger/send: 201 with `dispatch_id`, plus `notice` for an inactive Canvas."""
    body = await request.json()
    try:
        canvas_id, recipients = check_canvas_send(body)
    except Invalid as exc:
        return _json({"message": str(exc)}, 400)
    canvas = seed_of(request.app).canvas(canvas_id)
    if canvas is None:
        return _json({"message": "Invalid canvas_id"}, 400)
    dispatch = Dispatch(
        dispatch_id=uuid.uuid4().hex,
        kind="canvas",
        target_id=canvas_id,
        created_at=_now(),
        broadcast=recipients is None,
        audience=body.get("audience"),
        notice=NOTICES.get(canvas.state),
    )
    if dispatch.notice is None:
        store = request.app.state.sandbox.store
        shared = body.get("canvas_entry_properties") or {}
        deliver(store, dispatch, recipients, shared, "canvas_entry_properties", may_create=True)
    dispatches_of(request.app).append(dispatch)
    reply: dict[str, Any] = {"message": "success", "dispatch_id": dispatch.dispatch_id}
    if dispatch.notice is not None:
        reply["notice"] = dispatch.notice
    return _json(reply, 201)


async def campaign_schedule_create(request: Request) -> Response:
    """POST /campaigns/trigger/schedule/create: 201 with `dispatch_id` and `schedule_id`."""
    body = await request.json()
    try:
        campaign_id, recipients = check_campaign_schedule(body)
    except Invalid as exc:
        return _json({"message": str(exc)}, 400)
    if seed_of(request.app).campaign(campaign_id) is None:
        return _json({"message": "Invalid campaign_id"}, 400)
    dispatch = Dispatch(
        dispatch_id=uuid.uuid4().hex,
        kind="campaign_schedule",
        target_id=campaign_id,
        created_at=_now(),
        broadcast=recipients is None,
        audience=body.get("audience"),
        schedule_id=uuid.uuid4().hex,
        schedule=body["schedule"],
        send_id=body.get("send_id"),
    )
    store = request.app.state.sandbox.store
    shared = body.get("trigger_properties") or {}
    deliver(store, dispatch, recipients, shared, "trigger_properties", may_create=False)
    dispatches_of(request.app).append(dispatch)
    reply = {
        "dispatch_id": dispatch.dispatch_id,
        "schedule_id": dispatch.schedule_id,
        "message": "success",
    }
    return _json(reply, 201)


def routes() -> list[Route]:
    """The messaging endpoints and the dispatch log, for the sandbox app to mount."""
    return [
        Route("/canvas/trigger/send", canvas_trigger_send, methods=["POST"]),
        Route("/campaigns/trigger/schedule/create", campaign_schedule_create, methods=["POST"]),
        Route("/_sandbox/dispatches", list_dispatches, methods=["GET"]),
    ]
