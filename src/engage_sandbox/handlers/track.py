"""POST /users/track: validate every item, then apply the valid ones to the profile store.

Invariants:
- items are applied in the order attributes, then events, then purchases;
- an item with an error is reported as ``{"type", "input_array", "index"}`` and not applied;
  every other item is applied (201), unless no item at all is valid (400);
- a value the seed's definitions type otherwise, or of a blocklisted attribute, is dropped
  silently from an item that is applied (``attribute_types``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engage_sandbox.handlers.attribute_types import kept
from engage_sandbox.handlers.outcome import Outcome, fatal
from engage_sandbox.handlers.track_validation import (
    ARRAYS,
    NO_VALID,
    NON_ATTRIBUTE_KEYS,
    VALIDATORS,
    may_create,
    parse_time,
    reference,
    shape,
)
from engage_sandbox.state.counters import Counters, count_attribute, count_event, count_purchase
from engage_sandbox.state.dashboard_seed import CustomAttribute
from engage_sandbox.state.settings import SandboxSettings
from engage_sandbox.state.store import Profile, ProfileStore


def _profile_for(store: ProfileStore, item: dict[str, Any], counters: Counters) -> Profile | None:
    ref = reference(item)
    assert not isinstance(ref, str), "validated before"
    kind, value = ref
    profile = store.find(**{kind: value})
    if profile is None:
        if not may_create(kind, item.get("_update_existing_only")):
            counters.skipped_update_existing_only += 1
            return None
        profile = store.create(**{kind: value})
    return profile


def apply_attribute(store: ProfileStore, item: dict[str, Any], counters: Counters,
                    definitions: Mapping[str, CustomAttribute] | None = None) -> None:
    """Write one valid attributes object, propagating subscription groups by email; the
    values `definitions` (name → the seed's definition) do not take are dropped."""
    profile = _profile_for(store, item, counters)
    if profile is None:
        return
    ref_kind = reference(item)[0]
    values = {
        k: v
        for k, v in item.items()
        if k not in NON_ATTRIBUTE_KEYS and k != "subscription_groups" and k != ref_kind
    }
    store.apply_attributes(profile, kept(values, definitions or {}))
    for group in item.get("subscription_groups") or []:
        store.set_subscription(
            profile, group["subscription_group_id"], group["subscription_state"]
        )
    count_attribute(counters, item, ref_kind)


def _record(item: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    record = {k: item[k] for k in keys if item.get(k) is not None}
    record["_ts"] = parse_time(item["time"])
    return record


def apply_event(store: ProfileStore, item: dict[str, Any], counters: Counters) -> None:
    """Store one valid event on its profile and count it."""
    profile = _profile_for(store, item, counters)
    if profile is None:
        return
    profile.events.append(_record(item, ("name", "time", "app_id", "properties")))
    store.touch(profile)
    count_event(counters, reference(item), item["name"])  # type: ignore[arg-type]


def apply_purchase(store: ProfileStore, item: dict[str, Any], counters: Counters) -> None:
    """Store one valid purchase on its profile and count it."""
    profile = _profile_for(store, item, counters)
    if profile is None:
        return
    keys = ("product_id", "currency", "price", "quantity", "time", "app_id", "properties")
    record = _record(item, keys)
    record.setdefault("quantity", 1)
    profile.purchases.append(record)
    store.touch(profile)
    count_purchase(counters, str(item.get("product_id")))


APPLIERS = {"attributes": apply_attribute, "events": apply_event, "purchases": apply_purchase}


def handle_track(
    body: Any, settings: SandboxSettings, store: ProfileStore, counters: Counters,
    definitions: Mapping[str, CustomAttribute] | None = None,
) -> Outcome:
    """The full /users/track behaviour for an already parsed JSON body; `definitions`: the
    workspace's custom attributes by name (values they do not take are dropped)."""
    arrays = shape(body, settings)
    if isinstance(arrays, Outcome):
        return arrays
    errors: list[dict[str, Any]] = []
    valid: dict[str, list[dict[str, Any]]] = {}
    for name, items in arrays.items():
        check = VALIDATORS[name]
        valid[name] = []
        for index, item in enumerate(items):
            error = check(item)
            if error is None:
                valid[name].append(item)
            else:
                errors.append({"type": error, "input_array": name, "index": index})
    if not any(valid.values()):
        return fatal(NO_VALID, errors)
    for item in valid.get("attributes", ()):
        apply_attribute(store, item, counters, definitions)
    for name in ARRAYS[1:]:
        for item in valid.get(name, ()):
            APPLIERS[name](store, item, counters)
    result: dict[str, Any] = {"message": "success"}
    for name in ARRAYS:
        if name in arrays:
            result[f"{name}_processed"] = len(valid[name])
    if errors:
        result["errors"] = errors
    return Outcome(201, result)
