"""API-triggered messaging: Canvas sends and campaign schedules, with a record of dispatches.

Nothing is really sent: each accepted request becomes a `Dispatch` in the sandbox's dispatch
log (`GET /_sandbox/dispatches`), naming who would have received it with which properties.

Invariants:
- a request is validated whole before any side effect: a 400 changes no profile and logs
  no dispatch;
- recipient `attributes` are written before the audience is checked and the send recorded
  (the spec: attributes are written before the message is processed);
- a Canvas that is paused, stopped or archived sends nothing and changes no profile; the
  reply is still 201 with a `dispatch_id` and a `notice`.

Contract choices where the interface says "not shown":
- errors are `400 {"message": ...}`; an unknown `canvas_id` / `campaign_id` is
  `400 Invalid canvas_id` / `400 Invalid campaign_id`;
- `/campaigns/trigger/schedule/create` answers 201 and takes at most 50 recipients; its
  recipients may hold only `external_user_id`, `user_alias` and `trigger_properties`;
- both endpoints reject unknown top-level and recipient keys, and a present
  `send_to_existing_only` next to `user_alias` (whatever its value);
- when `recipients` is omitted `broadcast` must be `true` on both endpoints (with or without
  `audience`); the whole segment is every profile in the store;
- audience conditions the sandbox cannot evaluate (unknown kinds or comparisons,
  `last_used_app`) match every profile; `custom_attribute` and the subscription statuses are
  evaluated against profile attributes;
- the archived notice reads "The Canvas is archived. ..." like the paused one.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sandbox.dashboard_seed import parse_iso, seed_of

MAX_RECIPIENTS = 50
MAX_ENTRY_PROPERTIES_BYTES = 50 * 1024

NOTICES = {
    "paused": "The Canvas is paused. Resume the Canvas to ensure trigger requests will take "
    "effect.",
    "stopped": "The Canvas is stopped. Resume the Canvas to ensure trigger requests will take "
    "effect.",
    "archived": "The Canvas is archived. Unarchive the Canvas to ensure trigger requests will "
    "take effect.",
}

_CANVAS_KEYS = {"canvas_id", "canvas_entry_properties", "broadcast", "audience", "recipients"}
_CAMPAIGN_KEYS = {
    "campaign_id",
    "send_id",
    "recipients",
    "audience",
    "broadcast",
    "trigger_properties",
    "schedule",
}
_CANVAS_RECIPIENT_KEYS = {
    "external_user_id",
    "user_alias",
    "canvas_entry_properties",
    "send_to_existing_only",
    "attributes",
}
_CAMPAIGN_RECIPIENT_KEYS = {"external_user_id", "user_alias", "trigger_properties"}


class Invalid(ValueError):
    """A request that breaks a rule of the contract; the message is the 400 body's text."""


# ---------------------------------------------------------------- the dispatch log


@dataclass
class Dispatch:
    """One accepted send or schedule: who receives it (`sent`) and who was left out."""

    dispatch_id: str
    kind: str  # "canvas" or "campaign_schedule"
    target_id: str
    created_at: str
    broadcast: bool
    sent: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    notice: str | None = None
    schedule_id: str | None = None
    schedule: dict[str, Any] | None = None
    send_id: str | None = None
    audience: dict[str, Any] | None = None


def dispatches_of(app: Any) -> list[Dispatch]:
    """The app's dispatch log, oldest first (emptied by a sandbox reset)."""
    log = app.state.sandbox.extra.setdefault("messaging_dispatches", [])
    assert isinstance(log, list)
    return log


async def list_dispatches(request: Request) -> Response:
    """GET /_sandbox/dispatches[?dispatch_id=...]: the dispatch log as JSON, oldest first."""
    wanted = request.query_params.get("dispatch_id")
    items = [asdict(d) for d in dispatches_of(request.app) if wanted in (None, d.dispatch_id)]
    return _json({"dispatches": items}, 200)


# ---------------------------------------------------------------- validation (pure)


def _json(body: Any, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _object(value: Any, name: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid(f"{name} must be an object")
    return value


def _alias(value: Any, where: str) -> None:
    if not (
        isinstance(value, dict)
        and set(value) == {"alias_name", "alias_label"}
        and all(isinstance(v, str) and v for v in value.values())
    ):
        raise Invalid(
            f"{where}.user_alias must be an object with string alias_name and alias_label"
        )


def check_recipients(recipients: Any, allowed: set[str]) -> list[dict[str, Any]]:
    """The recipients list when valid; raises `Invalid` naming the first broken rule."""
    if not isinstance(recipients, list) or not all(isinstance(r, dict) for r in recipients):
        raise Invalid("recipients must be an array of objects")
    if len(recipients) > MAX_RECIPIENTS:
        raise Invalid(f"recipients may not hold more than {MAX_RECIPIENTS} objects")
    for i, rec in enumerate(recipients):
        where = f"recipients[{i}]"
        unknown = set(rec) - allowed
        if unknown:
            raise Invalid(f"{where} has unsupported field(s): {', '.join(sorted(unknown))}")
        if ("external_user_id" in rec) == ("user_alias" in rec):
            raise Invalid(f"{where} must have exactly one of 'external_user_id' or 'user_alias'")
        if "external_user_id" in rec and not (
            isinstance(rec["external_user_id"], str) and rec["external_user_id"]
        ):
            raise Invalid(f"{where}.external_user_id must be a non-empty string")
        if "user_alias" in rec:
            _alias(rec["user_alias"], where)
            if "send_to_existing_only" in rec:
                raise Invalid(f"{where}: send_to_existing_only cannot be used with user aliases")
        if not isinstance(rec.get("send_to_existing_only", True), bool):
            raise Invalid(f"{where}.send_to_existing_only must be a boolean")
        for key in ("canvas_entry_properties", "trigger_properties", "attributes"):
            _object(rec.get(key), f"{where}.{key}")
    return recipients


def check_audience(node: Any, where: str = "audience") -> None:
    """Raise `Invalid` unless `node` is a connected audience tree (AND/OR over conditions)."""
    if not isinstance(node, dict) or len(node) != 1:
        raise Invalid(f"{where} must be an object with exactly one condition or AND/OR")
    ((kind, value),) = node.items()
    if kind in ("AND", "OR"):
        if not isinstance(value, list) or not value:
            raise Invalid(f"{where}.{kind} must be a non-empty array")
        for i, child in enumerate(value):
            check_audience(child, f"{where}.{kind}[{i}]")
    elif not isinstance(value, dict):
        raise Invalid(f"{where}.{kind} must be an object")


def check_targeting(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Check broadcast / recipients / audience; the recipients list, or None for broadcast."""
    broadcast = body.get("broadcast", False)
    if not isinstance(broadcast, bool):
        raise Invalid("broadcast must be a boolean")
    if "audience" in body:
        check_audience(body["audience"])
    if broadcast and "recipients" in body:
        raise Invalid("recipients must not be included when broadcast is true")
    if not broadcast and "recipients" not in body:
        raise Invalid("broadcast must be true to send to the whole segment without recipients")
    return None if broadcast else body["recipients"]


def _required_id(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise Invalid(f"{key} is required and must be a non-empty string")
    return value


def _unknown(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(body) - allowed
    if unknown:
        raise Invalid(f"unsupported field(s): {', '.join(sorted(unknown))}")


def check_canvas_send(body: Any) -> tuple[str, list[dict[str, Any]] | None]:
    """A valid Canvas send body → (canvas_id, recipients or None for broadcast)."""
    if not isinstance(body, dict):
        raise Invalid("request body must be a JSON object")
    _unknown(body, _CANVAS_KEYS)
    canvas_id = _required_id(body, "canvas_id")
    props = _object(body.get("canvas_entry_properties"), "canvas_entry_properties")
    if props is not None and len(orjson.dumps(props)) > MAX_ENTRY_PROPERTIES_BYTES:
        raise Invalid("canvas_entry_properties may not exceed 50 KB")
    recipients = check_targeting(body)
    if recipients is not None:
        recipients = check_recipients(recipients, _CANVAS_RECIPIENT_KEYS)
    return canvas_id, recipients


def check_schedule(value: Any) -> dict[str, Any]:
    """A valid schedule object; raises `Invalid` when `time` is missing or not ISO 8601."""
    if not isinstance(value, dict):
        raise Invalid("schedule is required and must be an object")
    unknown = set(value) - {"time", "in_local_time", "at_optimal_time"}
    if unknown:
        raise Invalid(f"schedule has unsupported field(s): {', '.join(sorted(unknown))}")
    time = value.get("time")
    try:
        if not isinstance(time, str):
            raise ValueError(time)
        parse_iso(time)
    except ValueError:
        raise Invalid("schedule.time is required and must be an ISO 8601 datetime") from None
    for flag in ("in_local_time", "at_optimal_time"):
        if not isinstance(value.get(flag, False), bool):
            raise Invalid(f"schedule.{flag} must be a boolean")
    return value


def check_campaign_schedule(body: Any) -> tuple[str, list[dict[str, Any]] | None]:
    """A valid campaign schedule body → (campaign_id, recipients or None for broadcast)."""
    if not isinstance(body, dict):
        raise Invalid("request body must be a JSON object")
    _unknown(body, _CAMPAIGN_KEYS)
    campaign_id = _required_id(body, "campaign_id")
    if "send_id" in body and not isinstance(body["send_id"], str):
        raise Invalid("send_id must be a string")
    _object(body.get("trigger_properties"), "trigger_properties")
    check_schedule(body.get("schedule"))
    recipients = check_targeting(body)
    if recipients is not None:
        recipients = check_recipients(recipients, _CAMPAIGN_RECIPIENT_KEYS)
    return campaign_id, recipients


# ---------------------------------------------------------------- audience evaluation


def _compare(actual: Any, comparison: str, expected: Any) -> bool:
    """One condition's comparison; comparisons the sandbox does not know match."""
    if comparison in ("equals", "is"):
        return bool(actual == expected)
    if comparison in ("not_equal", "does_not_equal", "is_not"):
        return bool(actual != expected)
    if comparison == "includes_value":
        return isinstance(actual, list) and expected in actual
    if comparison == "does_not_include_value":
        return not (isinstance(actual, list) and expected in actual)
    if comparison == "exists":
        return actual is not None
    if comparison == "does_not_exist":
        return actual is None
    return True


def in_audience(node: dict[str, Any] | None, attributes: dict[str, Any]) -> bool:
    """Whether a profile with these attributes is in the connected audience (None = all)."""
    if node is None:
        return True
    ((kind, value),) = node.items()
    if kind == "AND":
        return all(in_audience(child, attributes) for child in value)
    if kind == "OR":
        return any(in_audience(child, attributes) for child in value)
    comparison = str(value.get("comparison", ""))
    if kind == "custom_attribute":
        actual = attributes.get(str(value.get("custom_attribute_name")))
        return _compare(actual, comparison, value.get("value"))
    if kind in ("email_subscription_status", "push_subscription_status"):
        key = "email_subscribe" if kind.startswith("email") else "push_subscribe"
        return _compare(attributes.get(key), comparison, value.get("value"))
    return True


# ---------------------------------------------------------------- sending


def _profile_attributes(profile: Any) -> dict[str, Any]:
    attrs = dict(profile.attributes)
    for key in ("email", "phone", "external_id"):
        if getattr(profile, key, None) is not None:
            attrs.setdefault(key, getattr(profile, key))
    return attrs


def _who(profile: Any) -> dict[str, Any]:
    return {
        "platform_id": profile.platform_id,
        "external_id": profile.external_id,
        "aliases": sorted(
            [{"alias_label": lab, "alias_name": nam} for lab, nam in profile.aliases],
            key=lambda a: (a["alias_label"], a["alias_name"]),
        ),
    }


def _reference(rec: dict[str, Any]) -> dict[str, Any]:
    if "external_user_id" in rec:
        return {"external_user_id": rec["external_user_id"]}
    return {"user_alias": rec["user_alias"]}


def deliver(
    store: Any,
    dispatch: Dispatch,
    recipients: list[dict[str, Any]] | None,
    shared: dict[str, Any],
    per_recipient_key: str,
    may_create: bool,
) -> None:
    """Resolve recipients (or the whole store for a broadcast) into `dispatch.sent/skipped`.

    Recipient attributes are written first; unknown ids are created only when `may_create`
    and the recipient sets `send_to_existing_only: false`.
    """
    audience = dispatch.audience
    if recipients is None:
        for profile in store.all():
            if in_audience(audience, _profile_attributes(profile)):
                dispatch.sent.append({**_who(profile), "properties": dict(shared)})
        return
    for rec in recipients:
        external_id = rec.get("external_user_id")
        alias = rec.get("user_alias")
        create = (
            may_create and external_id is not None and not rec.get("send_to_existing_only", True)
        )
        profile = store.find(external_id=external_id, user_alias=alias)
        attributes = rec.get("attributes")
        if attributes is not None or (profile is None and create):
            profile = store.upsert_attributes(
                external_id=external_id,
                user_alias=alias,
                attributes=dict(attributes or {}),
                create=create,
            )
        if profile is None:
            dispatch.skipped.append({**_reference(rec), "reason": "user not found"})
        elif not in_audience(audience, _profile_attributes(profile)):
            dispatch.skipped.append({**_reference(rec), "reason": "not in audience"})
        else:
            props = {**shared, **(rec.get(per_recipient_key) or {})}
            dispatch.sent.append({**_who(profile), "properties": props})


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
