"""Identity endpoints: /users/delete, /users/identify, /users/merge, /users/alias/update and
/users/alias/new.

Invariants: a request is validated whole before anything changes (400 = nothing applied); each
request holds at most 50 items; an identifier given by email or phone resolves through its
``prioritization`` and does nothing when more than one profile remains. The service runs
merges asynchronously; the sandbox applies them before answering, so a test can look at the
result at once.
"""

from __future__ import annotations

from typing import Any

from engage_sandbox.handlers.outcome import Outcome
from engage_sandbox.handlers.subscriptions import bad
from engage_sandbox.handlers.track_validation import EMAIL, is_alias
from engage_sandbox.state.store import PRIORITIES, Profile, ProfileStore

MAX_ITEMS = 50

MERGE_NOT_ARRAY = "'merge_updates' must be an array of objects"
MERGE_TOO_MANY = "a single request may not contain more than 50 merge updates"
MERGE_BAD_IDENTIFIER = (
    "identifiers must be objects with an 'external_id' property that is a string, "
    "'user_alias' property that is an object, or 'email' property that is a string"
)
MERGE_KEYS = "'merge_updates' must only have 'identifier_to_merge' and 'identifier_to_keep'"
PRIORITIZATION = (
    "'prioritization' must be a non-empty array of 'identified', 'unidentified' and "
    "'most_recently_updated', with at most one of 'identified' and 'unidentified'"
)
DELETE_TOO_MANY = "a single request may not contain more than 50 identifiers"

Identifier = tuple[str, Any, list[str]]  # (kind, value, prioritization)


def prioritization_ok(value: Any) -> bool:
    """A valid prioritization array (spec: Merge update object)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(v in PRIORITIES for v in value)
        and not ("identified" in value and "unidentified" in value)
    )


def parse_identifier(obj: Any) -> Identifier | None:
    """A merge identifier object: exactly one of external_id, user_alias, email, phone_number;
    email and phone_number need a prioritization. None when malformed."""
    if not isinstance(obj, dict):
        return None
    kinds = [k for k in ("external_id", "user_alias", "email", "phone_number") if k in obj]
    if len(kinds) != 1 or set(obj) - {kinds[0], "prioritization"}:
        return None
    kind, value = kinds[0], obj[kinds[0]]
    if kind == "user_alias":
        return (kind, value, []) if is_alias(value) and "prioritization" not in obj else None
    if not isinstance(value, str) or not value:
        return None
    if kind == "external_id":
        return (kind, value, []) if "prioritization" not in obj else None
    prioritization: Any = obj.get("prioritization")
    if not prioritization_ok(prioritization):
        return None
    return kind, value, list(prioritization)


def resolve(store: ProfileStore, ident: Identifier) -> Profile | None:
    """The one profile an identifier names, or None (absent or ambiguous)."""
    kind, value, prioritization = ident
    if kind == "external_id":
        return store.find(external_id=value)
    if kind == "user_alias":
        return store.find(user_alias=value)
    holders = store.by_email(value) if kind == "email" else store.by_phone(value)
    return store.prioritized(holders, prioritization)


# ---- /users/merge ------------------------------------------------------------------------


def handle_merge(body: Any, store: ProfileStore) -> Outcome:
    """POST /users/merge: 202 on success, 400 with one of the four messages of the spec."""
    updates = body.get("merge_updates") if isinstance(body, dict) else None
    if not isinstance(updates, list) or not all(isinstance(u, dict) for u in updates):
        return bad(MERGE_NOT_ARRAY)
    if len(updates) > MAX_ITEMS:
        return bad(MERGE_TOO_MANY)
    pairs: list[tuple[Identifier, Identifier]] = []
    for update in updates:
        if set(update) != {"identifier_to_merge", "identifier_to_keep"}:
            return bad(MERGE_KEYS)
        merge = parse_identifier(update["identifier_to_merge"])
        keep = parse_identifier(update["identifier_to_keep"])
        if merge is None or keep is None:
            return bad(MERGE_BAD_IDENTIFIER)
        pairs.append((merge, keep))
    for merge, keep in pairs:
        source, target = resolve(store, merge), resolve(store, keep)
        if source is not None and target is not None and source is not target:
            store.merge(source, target)
    return Outcome(202, {"message": "success"})


# ---- /users/delete -----------------------------------------------------------------------


def _list_of(body: dict[str, Any], name: str, check: Any) -> list[Any] | str:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(check(v) for v in value):
        return f"'{name}' is not valid"
    return value


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_email_entry(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("email"), str)
        and EMAIL.match(value["email"]) is not None
        and prioritization_ok(value.get("prioritization"))
    )


def handle_delete(body: Any, store: ProfileStore) -> Outcome:
    """POST /users/delete: 201 ``{"deleted": N}``, N = profiles found and deleted.

    Identifier kinds may be combined; at most 50 identifiers in total.
    """
    if not isinstance(body, dict):
        return bad("request body must be a JSON object")
    lists: dict[str, list[Any]] = {}
    for name, check in (
        ("external_ids", _is_id),
        ("user_aliases", is_alias),
        ("platform_ids", _is_id),
        ("email_addresses", _is_email_entry),
    ):
        parsed = _list_of(body, name, check)
        if isinstance(parsed, str):
            return bad(parsed)
        lists[name] = parsed
    total = sum(len(v) for v in lists.values())
    if total == 0:
        return bad(
            "one of 'external_ids', 'user_aliases', 'platform_ids' or 'email_addresses' "
            "is required"
        )
    if total > MAX_ITEMS:
        return bad(DELETE_TOO_MANY)
    found: dict[str, Profile] = {}
    candidates = [store.find(external_id=v) for v in lists["external_ids"]]
    candidates += [store.find(user_alias=v) for v in lists["user_aliases"]]
    candidates += [store.find(platform_id=v) for v in lists["platform_ids"]]
    candidates += [
        store.prioritized(store.by_email(e["email"]), e["prioritization"])
        for e in lists["email_addresses"]
    ]
    for profile in candidates:
        if profile is not None:
            found[profile.platform_id] = profile
    for profile in found.values():
        store.delete(profile)
    return Outcome(201, {"deleted": len(found)})


# ---- /users/identify ---------------------------------------------------------------------


def _identify(store: ProfileStore, aliased: Profile | None, external_id: str) -> None:
    """Merge an unidentified profile into the one with ``external_id``, or give it the id."""
    identified = store.find(external_id=external_id)
    if aliased is None or aliased is identified or aliased.external_id is not None:
        return
    if identified is None:
        store.set_external_id(aliased, external_id)
        store.touch(aliased)
    else:
        store.merge(aliased, identified)


def _is_alias_to_identify(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _is_id(value.get("external_id"))
        and is_alias(value.get("user_alias"))
    )


def _is_email_to_identify(value: Any) -> bool:
    return _is_email_entry(value) and _is_id(value.get("external_id"))


def handle_identify(body: Any, store: ProfileStore) -> Outcome:
    """POST /users/identify: 201 ``{"aliases_processed": N, "message": "success"}``.

    Every call merges (spec rule 1; ``merge_behavior`` is checked but ``none`` merges too).
    An alias unknown to the store is attached to the profile with the external_id, if any.
    N counts the entries of ``aliases_to_identify``.
    """
    if not isinstance(body, dict):
        return bad("request body must be a JSON object")
    behavior = body.get("merge_behavior")
    if behavior is not None and behavior not in ("none", "merge"):
        return bad("'merge_behavior' must be 'none' or 'merge'")
    aliases = _list_of(body, "aliases_to_identify", _is_alias_to_identify)
    emails = _list_of(body, "emails_to_identify", _is_email_to_identify)
    if isinstance(aliases, str) or isinstance(emails, str):
        return bad(aliases if isinstance(aliases, str) else str(emails))
    if not aliases and not emails:
        return bad("'aliases_to_identify' is required")
    if len(aliases) > MAX_ITEMS or len(emails) > MAX_ITEMS:
        return bad("a single request may not contain more than 50 aliases to identify")
    for entry in aliases:
        alias = entry["user_alias"]
        aliased = store.find(user_alias=alias)
        if aliased is None:
            identified = store.find(external_id=entry["external_id"])
            if identified is not None:
                store.add_alias(identified, (alias["alias_label"], alias["alias_name"]))
                store.touch(identified)
            continue
        _identify(store, aliased, entry["external_id"])
    for entry in emails:
        holders = [p for p in store.by_email(entry["email"])]
        _identify(store, store.prioritized(holders, entry["prioritization"]), entry["external_id"])
    return Outcome(201, {"aliases_processed": len(aliases), "message": "success"})


# ---- /users/alias/update and /users/alias/new ----------------------------------------------


def _is_alias_update(value: Any) -> bool:
    return isinstance(value, dict) and all(
        _is_id(value.get(k)) for k in ("alias_label", "old_alias_name", "new_alias_name")
    )


def handle_alias_update(body: Any, store: ProfileStore) -> Outcome:
    """POST /users/alias/update: 201 ``{"message": "success"}``; absent aliases are skipped."""
    updates = body.get("alias_updates") if isinstance(body, dict) else None
    if not isinstance(updates, list) or not updates or not all(map(_is_alias_update, updates)):
        return bad(
            "'alias_updates' must be a non-empty array of objects with string 'alias_label', "
            "'old_alias_name' and 'new_alias_name'"
        )
    if len(updates) > MAX_ITEMS:
        return bad("a single request may not contain more than 50 alias updates")
    for u in updates:
        store.rename_alias(u["alias_label"], u["old_alias_name"], u["new_alias_name"])
    return Outcome(201, {"message": "success"})


def _is_new_alias(value: Any) -> bool:
    return (
        is_alias(value)
        and (value.get("external_id") is None or _is_id(value.get("external_id")))
    )


def handle_alias_new(body: Any, store: ProfileStore) -> Outcome:
    """POST /users/alias/new: add aliases to identified users, or create alias-only users.

    201 ``{"aliases_processed": N, "message": "success"}``. A taken alias or an unknown
    external_id is skipped.
    """
    entries = body.get("user_aliases") if isinstance(body, dict) else None
    if not isinstance(entries, list) or not entries or not all(map(_is_new_alias, entries)):
        return bad(
            "'user_aliases' must be a non-empty array of objects with string 'alias_name' "
            "and 'alias_label'"
        )
    if len(entries) > MAX_ITEMS:
        return bad("a single request may not contain more than 50 aliases")
    for entry in entries:
        alias = {"alias_label": entry["alias_label"], "alias_name": entry["alias_name"]}
        if store.find(user_alias=alias) is not None:
            continue
        if entry.get("external_id") is None:
            store.create(user_alias=alias)
            continue
        profile = store.find(external_id=entry["external_id"])
        if profile is not None:
            store.add_alias(profile, (alias["alias_label"], alias["alias_name"]))
            store.touch(profile)
    return Outcome(201, {"aliases_processed": len(entries), "message": "success"})
