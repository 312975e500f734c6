"""Validation of the messaging request bodies, pure: each check returns the valid value or
raises `Invalid` naming the first broken rule.

Contract choices where the interface says "not shown":
- `/campaigns/trigger/schedule/create` takes at most 50 recipients; its recipients may hold
  only `external_user_id`, `user_alias` and `trigger_properties`;
- both endpoints reject unknown top-level and recipient keys, and a present
  `send_to_existing_only` next to `user_alias` (whatever its value);
- when `recipients` is omitted `broadcast` must be `true` on both endpoints (with or without
  `audience`).
"""

from __future__ import annotations

from typing import Any

import orjson

from engage_sandbox.state.dashboard_seed import parse_iso

MAX_RECIPIENTS = 50
MAX_ENTRY_PROPERTIES_BYTES = 50 * 1024

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
