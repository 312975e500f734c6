"""Subscription-group endpoints: ``/subscription/status/set`` and ``/v2/subscription/status/set``.

Invariants: a request is validated whole before anything changes (400 = nothing applied);
every identifier list holds 1 to 50 entries; emails and phones never share one object;
changing a user's state also changes it for every profile sharing that user's email.
Unknown external_ids, emails and phones are skipped (no profile is created: a documented
choice, the spec does not say).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engage_sandbox.handlers.outcome import Outcome
from engage_sandbox.handlers.track_validation import EMAIL, SUB_STATES
from engage_sandbox.state.store import Profile, ProfileStore, is_e164

MAX_IDS = 50
SUCCESS = Outcome(201, {"message": "success"})


@dataclass(frozen=True)
class Change:
    """One validated group change."""

    group_id: str
    state: str
    external_ids: tuple[str, ...]
    emails: tuple[str, ...]
    phones: tuple[str, ...]


def bad(message: str) -> Outcome:
    """A 400 with ``{"message": message}``."""
    return Outcome(400, {"message": message})


def _strings(value: Any, name: str, *, allow_single: bool) -> tuple[str, ...] | str:
    if allow_single and isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or not 1 <= len(value) <= MAX_IDS
        or not all(isinstance(v, str) and v for v in value)
    ):
        kind = "a string or an array" if allow_single else "an array"
        return f"'{name}' must be {kind} of 1 to {MAX_IDS} strings"
    return tuple(value)


def parse_change(obj: Any, ids: str, emails: str, phones: str) -> Change | str:
    """Validate one group object; ``ids``/``emails``/``phones`` are the field names used."""
    if not isinstance(obj, dict):
        return "each subscription group update must be an object"
    group = obj.get("subscription_group_id")
    if not isinstance(group, str) or not group:
        return "'subscription_group_id' is required"
    state = obj.get("subscription_state")
    if state not in SUB_STATES:
        return "'subscription_state' must be 'subscribed' or 'unsubscribed'"
    present = [name for name in (ids, emails, phones) if obj.get(name) is not None]
    if not present:
        return f"'{ids}', '{emails}' or '{phones}' is required"
    if emails in present and phones in present:
        return f"'{emails}' and '{phones}' cannot both be given in one object"
    lists: dict[str, tuple[str, ...]] = {ids: (), emails: (), phones: ()}
    for name in present:
        parsed = _strings(obj[name], name, allow_single=name == emails)
        if isinstance(parsed, str):
            return parsed
        lists[name] = parsed
    if not all(EMAIL.match(e) for e in lists[emails]):
        return f"'{emails}' must hold valid email addresses"
    if not all(is_e164(p) for p in lists[phones]):
        return f"'{phones}' must hold phone numbers in E.164 format"
    return Change(group, state, lists[ids], lists[emails], lists[phones])


def apply_change(store: ProfileStore, change: Change) -> int:
    """Apply one change; returns how many profiles changed."""
    targets: dict[str, Profile] = {}
    for external_id in change.external_ids:
        profile = store.find(external_id=external_id)
        if profile is not None:
            targets[profile.platform_id] = profile
    for email in change.emails:
        targets.update((p.platform_id, p) for p in store.by_email(email))
    for phone in change.phones:
        targets.update((p.platform_id, p) for p in store.by_phone(phone))
    changed: set[str] = set()
    for profile in targets.values():
        changed.update(
            p.platform_id for p in store.set_subscription(profile, change.group_id, change.state)
        )
    return len(changed)


def handle_v1(body: Any, store: ProfileStore) -> Outcome:
    """POST /subscription/status/set: one group per request."""
    if not isinstance(body, dict):
        return bad("request body must be a JSON object")
    change = parse_change(body, "external_id", "email", "phone")
    if isinstance(change, str):
        return bad(change)
    apply_change(store, change)
    return SUCCESS


def handle_v2(body: Any, store: ProfileStore) -> Outcome:
    """POST /v2/subscription/status/set: an array of group objects."""
    groups = body.get("subscription_groups") if isinstance(body, dict) else None
    if not isinstance(groups, list) or not groups:
        return bad("'subscription_groups' must be a non-empty array of objects")
    changes: list[Change] = []
    for obj in groups:
        change = parse_change(obj, "external_ids", "emails", "phones")
        if isinstance(change, str):
            return bad(change)
        changes.append(change)
    for change in changes:
        apply_change(store, change)
    return SUCCESS
