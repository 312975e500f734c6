"""The dispatch log (one `Dispatch` per accepted send or schedule) and `deliver`, which
resolves a send's recipients against the profile store.

Invariants:
- recipient `attributes` are written before the audience is checked and the send recorded
  (the spec: attributes are written before the message is processed);
- a broadcast goes to the whole segment: every profile in the store that is in the audience.

Contract choice where the interface says "not shown": audience conditions the sandbox cannot
evaluate (unknown kinds or comparisons, `last_used_app`) match every profile;
`custom_attribute` and the subscription statuses are evaluated against profile attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
