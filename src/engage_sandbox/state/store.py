"""The profile store: profiles keyed by external_id, alias, email, phone and platform_id.

Invariants:
- an external_id, an alias (label, name) and a platform_id each belong to at most one profile;
- an email or phone may be shared by several profiles; lookups by them return the most
  recently updated holder (``updated`` is a strictly increasing counter, bumped on each write);
- the indexes always agree with the profiles' fields (all writes go through this class).
Single-threaded by design: every handler runs on the server's event loop.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

ARRAY_OPERATORS = frozenset({"add", "remove", "update"})
"""An attribute value that is an object whose keys are all among these edits an array:
``add`` and ``remove`` hold arrays of strings, ``update`` an array of objects. The spec lists
only the attribute types (string, boolean, integer, array); this shape rule is the service's
observed behaviour (a wrong shape is an item error for that object alone)."""


def is_array_operation(value: Any) -> bool:
    """Whether an attribute value is an array operation (a non-empty object of operators)."""
    return isinstance(value, dict) and bool(value) and value.keys() <= ARRAY_OPERATORS


E164 = re.compile(r"^\+[1-9][0-9]{1,14}$")
PRIORITIES = ("identified", "unidentified", "most_recently_updated")

Alias = tuple[str, str]  # (alias_label, alias_name)


def is_e164(value: object) -> bool:
    """True when ``value`` is a string phone number in E.164 form (``+`` and 2-15 digits)."""
    return isinstance(value, str) and E164.match(value) is not None


def norm_email(value: str) -> str:
    """Email index key: trimmed and lower-cased."""
    return value.strip().lower()


@dataclass
class Profile:
    """One user profile. ``attributes`` holds standard and custom attributes alike."""

    platform_id: str
    external_id: str | None = None
    aliases: set[Alias] = field(default_factory=set)
    email: str | None = None
    phone: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    subscription_groups: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    purchases: list[dict[str, Any]] = field(default_factory=list)
    updated: int = 0

    def ref(self) -> str:
        """A readable reference: the external_id, else ``alias:label:name``, email, phone, id."""
        if self.external_id is not None:
            return self.external_id
        if self.aliases:
            label, name = sorted(self.aliases)[0]
            return f"alias:{label}:{name}"
        if self.email:
            return f"email:{self.email}"
        if self.phone:
            return f"phone:{self.phone}"
        return f"platform_id:{self.platform_id}"

    def to_json(self) -> dict[str, Any]:
        """The control-plane view of the profile (see ``GET /_sandbox/profiles``)."""
        return {
            "platform_id": self.platform_id,
            "external_id": self.external_id,
            "user_aliases": [
                {"alias_label": label, "alias_name": name} for label, name in sorted(self.aliases)
            ],
            "email": self.email,
            "phone": self.phone,
            "attributes": self.attributes,
            "subscription_groups": self.subscription_groups,
            "events": [_public(e) for e in self.events],
            "purchases": [_public(p) for p in self.purchases],
            "event_summary": _summary(self.events, "name"),
            "purchase_summary": _summary(self.purchases, "product_id"),
            "updated_order": self.updated,
        }


def _public(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if not k.startswith("_")}


def _summary(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """Per name: count, first and last time (derived, so merges sum counts and keep extremes)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        ts, when = item.get("_ts", 0.0), item.get("time")
        entry = out.get(item[key])
        if entry is None:
            out[item[key]] = {"count": 1, "first": when, "last": when, "_f": ts, "_l": ts}
            continue
        entry["count"] += 1
        if ts < entry["_f"]:
            entry["first"], entry["_f"] = when, ts
        if ts > entry["_l"]:
            entry["last"], entry["_l"] = when, ts
    return {n: {k: v for k, v in e.items() if not k.startswith("_")} for n, e in out.items()}


class ProfileStore:
    """All profiles of the sandbox workspace, with their identifier indexes."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every profile."""
        self._profiles: dict[str, Profile] = {}
        self._by_external: dict[str, Profile] = {}
        self._by_alias: dict[Alias, Profile] = {}
        self._by_email: dict[str, dict[str, Profile]] = {}
        self._by_phone: dict[str, dict[str, Profile]] = {}
        self._clock = 0

    # ---- lookups -------------------------------------------------------------------------

    def all(self) -> list[Profile]:
        """Every profile, oldest update first."""
        return sorted(self._profiles.values(), key=lambda p: p.updated)

    def __len__(self) -> int:
        return len(self._profiles)

    def by_email(self, email: str) -> list[Profile]:
        """Every profile holding ``email``, most recently updated first."""
        holders = self._by_email.get(norm_email(email), {})
        return sorted(holders.values(), key=lambda p: -p.updated)

    def by_phone(self, phone: str) -> list[Profile]:
        """Every profile holding ``phone``, most recently updated first."""
        return sorted(self._by_phone.get(phone, {}).values(), key=lambda p: -p.updated)

    def find(
        self,
        *,
        external_id: str | None = None,
        user_alias: dict[str, str] | None = None,
        email: str | None = None,
        phone: str | None = None,
        platform_id: str | None = None,
    ) -> Profile | None:
        """The profile with the one given identifier (email/phone: most recently updated)."""
        if external_id is not None:
            return self._by_external.get(external_id)
        if user_alias is not None:
            return self._by_alias.get((user_alias["alias_label"], user_alias["alias_name"]))
        if platform_id is not None:
            return self._profiles.get(platform_id)
        if email is not None:
            holders = self.by_email(email)
            return holders[0] if holders else None
        if phone is not None:
            holders = self.by_phone(phone)
            return holders[0] if holders else None
        return None

    def prioritized(self, candidates: list[Profile], prioritization: list[str]) -> Profile | None:
        """Apply a prioritization array; None when no single profile remains.

        ``identified``/``unidentified`` prefer profiles with/without an external_id (the
        others stay when none match); ``most_recently_updated`` keeps the newest one.
        """
        pool = list(candidates)
        for rule in prioritization:
            if rule == "identified":
                pool = [p for p in pool if p.external_id is not None] or pool
            elif rule == "unidentified":
                pool = [p for p in pool if p.external_id is None] or pool
            elif rule == "most_recently_updated" and pool:
                pool = [max(pool, key=lambda p: p.updated)]
        return pool[0] if len(pool) == 1 else None

    # ---- writes --------------------------------------------------------------------------

    def touch(self, profile: Profile) -> None:
        """Mark ``profile`` as the most recently updated one."""
        self._clock += 1
        profile.updated = self._clock

    def create(
        self,
        *,
        external_id: str | None = None,
        user_alias: dict[str, str] | None = None,
        email: str | None = None,
        phone: str | None = None,
    ) -> Profile:
        """A new profile with the given identifiers (the caller checked they are free)."""
        profile = Profile(platform_id=uuid.uuid4().hex[:24])
        self._profiles[profile.platform_id] = profile
        if external_id is not None:
            self.set_external_id(profile, external_id)
        if user_alias is not None:
            self.add_alias(profile, (user_alias["alias_label"], user_alias["alias_name"]))
        if email is not None:
            self.set_email(profile, email)
        if phone is not None:
            self.set_phone(profile, phone)
        self.touch(profile)
        return profile

    def set_external_id(self, profile: Profile, external_id: str) -> None:
        """Give ``profile`` the external_id (an alias-only profile becomes identified)."""
        if profile.external_id is not None:
            self._by_external.pop(profile.external_id, None)
        profile.external_id = external_id
        self._by_external[external_id] = profile

    def add_alias(self, profile: Profile, alias: Alias) -> None:
        """Attach ``alias``; it must not belong to another profile."""
        profile.aliases.add(alias)
        self._by_alias[alias] = profile

    def rename_alias(self, label: str, old_name: str, new_name: str) -> bool:
        """Rename alias (label, old) to (label, new); False when absent or new is taken."""
        profile = self._by_alias.get((label, old_name))
        if profile is None or (label, new_name) in self._by_alias:
            return False
        del self._by_alias[(label, old_name)]
        profile.aliases.discard((label, old_name))
        self.add_alias(profile, (label, new_name))
        self.touch(profile)
        return True

    def set_email(self, profile: Profile, email: str | None) -> None:
        """Set or clear the profile's email, keeping the email index in step."""
        if profile.email is not None:
            self._by_email.get(norm_email(profile.email), {}).pop(profile.platform_id, None)
        profile.email = email
        if email is not None:
            self._by_email.setdefault(norm_email(email), {})[profile.platform_id] = profile
            profile.attributes["email"] = email
        else:
            profile.attributes.pop("email", None)

    def set_phone(self, profile: Profile, phone: str | None) -> None:
        """Set or clear the phone; only E.164 numbers are indexed as references."""
        if profile.phone is not None:
            self._by_phone.get(profile.phone, {}).pop(profile.platform_id, None)
        profile.phone = phone
        if phone is not None:
            if is_e164(phone):
                self._by_phone.setdefault(phone, {})[profile.platform_id] = profile
            profile.attributes["phone"] = phone
        else:
            profile.attributes.pop("phone", None)

    def apply_attributes(self, profile: Profile, attributes: dict[str, Any]) -> None:
        """Apply attribute values with the /users/track rules.

        None unsets; ``email``/``phone`` update the indexes; a mapping of only ``add``,
        ``remove`` and ``update`` lists edits an array attribute (``edited_array``); any other
        value replaces the old one.
        Subscription groups are not handled here (see :meth:`set_subscription`).
        """
        for key, value in attributes.items():
            if key == "email":
                self.set_email(profile, value if isinstance(value, str) else None)
            elif key == "phone":
                self.set_phone(profile, value if isinstance(value, str) else None)
            elif value is None:
                profile.attributes.pop(key, None)
            elif is_array_operation(value):
                profile.attributes[key] = edited_array(profile.attributes.get(key), value)
            else:
                profile.attributes[key] = value
        self.touch(profile)

    def upsert_attributes(
        self,
        *,
        external_id: str | None = None,
        user_alias: dict[str, str] | None = None,
        attributes: dict[str, Any],
        create: bool = True,
    ) -> Profile | None:
        """Find (or, with ``create``, make) the profile and apply ``attributes`` to it.

        Exactly one of ``external_id`` and ``user_alias`` must be given (ValueError otherwise).
        Returns None when the profile is absent and ``create`` is False.
        """
        if (external_id is None) == (user_alias is None):
            raise ValueError("give exactly one of external_id and user_alias")
        profile = self.find(external_id=external_id, user_alias=user_alias)
        if profile is None:
            if not create:
                return None
            profile = self.create(external_id=external_id, user_alias=user_alias)
        self.apply_attributes(profile, attributes)
        return profile

    def set_subscription(self, profile: Profile, group_id: str, state: str) -> list[Profile]:
        """Set the group state on ``profile`` and every profile sharing its email.

        Returns the profiles changed.
        """
        targets = [profile]
        if profile.email:
            targets += [p for p in self.by_email(profile.email) if p is not profile]
        for target in targets:
            target.subscription_groups[group_id] = state
            self.touch(target)
        return targets

    def delete(self, profile: Profile) -> None:
        """Remove ``profile`` and every index entry pointing at it."""
        self.set_email(profile, None)
        self.set_phone(profile, None)
        if profile.external_id is not None:
            self._by_external.pop(profile.external_id, None)
        for alias in profile.aliases:
            self._by_alias.pop(alias, None)
        self._profiles.pop(profile.platform_id, None)

    def merge(self, source: Profile, target: Profile) -> None:
        """Merge ``source`` into ``target`` and remove ``source`` (spec: /users/merge).

        Fields and attributes the target lacks are copied; the target's own are kept.
        Events and purchases move over, so per-name counts add up and the first/last
        occurrence is the earlier/later of both. Aliases move to the target.
        """
        if source is target:
            return
        for key, value in source.attributes.items():
            if key not in target.attributes:
                target.attributes[key] = value
        if target.email is None and source.email is not None:
            email = source.email
            self.set_email(source, None)
            self.set_email(target, email)
        if target.phone is None and source.phone is not None:
            phone = source.phone
            self.set_phone(source, None)
            self.set_phone(target, phone)
        for group, state in source.subscription_groups.items():
            target.subscription_groups.setdefault(group, state)
        target.events.extend(source.events)
        target.purchases.extend(source.purchases)
        aliases = list(source.aliases)
        self.delete(source)
        for alias in aliases:
            self.add_alias(target, alias)
        self.touch(target)


def edited_array(current: Any, operation: dict[str, Any]) -> list[Any]:
    """An array attribute after an array operation whose shape was validated (lists only):
    ``add`` and ``update`` append the elements not already present (the sandbox's reading of
    ``update``: the spec shows no finer semantics), then ``remove`` drops the listed ones."""
    items = list(current) if isinstance(current, list) else []
    for name in ("add", "update"):
        items.extend(v for v in operation.get(name) or [] if v not in items)
    removed = operation.get("remove") or []
    return [v for v in items if v not in removed]
