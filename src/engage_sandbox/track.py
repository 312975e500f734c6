"""POST /users/track: request shape, per-item validation and applying items to the store.

Invariants:
- validation is pure (functions of the item), so the lean path and the full path agree;
- items are applied in the order attributes, then events, then purchases;
- an item with an error is reported as ``{"type", "input_array", "index"}`` and not applied;
  every other item is applied (201), unless no item at all is valid (400).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from engage_sandbox.settings import SandboxSettings
from engage_sandbox.store import Profile, ProfileStore, is_array_operation, is_e164

ARRAYS = ("attributes", "events", "purchases")

# Fatal messages (400).
MAX_INPUT = "Max Input Length Exceeded"
NO_VALID = "Valid data must be provided in the 'attributes', 'events', or 'purchases' fields."

# Item error types. The first three are the service's own texts (facts); the rest are the
# sandbox's documented choices for the rules of the spec.
REQUIRED_REF = "'external_id', 'braze_id', 'user_alias', 'email' or 'phone' is required"
BAD_QUANTITY = "'quantity' is not valid"
BLACKLISTED = "provided external_id is blacklisted and disallowed"
MULTIPLE_REFS = "only one of 'external_id', 'braze_id' or 'user_alias' may be given"
NOT_OBJECT = "item must be an object"
BAD_FLAG = "'_update_existing_only' must be a boolean"
BAD_SUBSCRIBE = "'email_subscribe' is not valid"
BAD_GROUPS = "'subscription_groups' is not valid"
PROPS_NOT_OBJECT = "'properties' must be an object"
PROP_NAME = "property names must be non-empty strings of at most 255 characters"
PROP_DOLLAR = "property names must not start with '$'"
PROP_STRING = "string property values must be at most 255 characters"
PROP_TYPE = "property values must be numbers, booleans, dates, strings, arrays or objects"
PROP_ARRAY_DATE = "dates are not allowed inside property arrays"
PROP_TOO_LARGE = "properties with array or object values must be at most 100 KB"


def not_valid(name: str) -> str:
    """The item error type for a field with a wrong value: ``'<name>' is not valid``."""
    return f"'{name}' is not valid"


def required(name: str) -> str:
    """The item error type for a missing field: ``'<name>' is required``."""
    return f"'{name}' is required"


# Dummy ids refused with BLACKLISTED (compared trimmed and case-insensitively).
BLACKLIST = frozenset(
    {"undefined", "null", "nil", "none", "0", "-1", "n/a", "user_id", "[object object]"}
)
EMAIL_SUBSCRIBE = frozenset({"subscribed", "unsubscribed", "opted_in"})
SUB_STATES = frozenset({"subscribed", "unsubscribed"})
REF_KEYS = ("external_id", "user_alias", "platform_id")
NON_ATTRIBUTE_KEYS = frozenset({*REF_KEYS, "_update_existing_only"})
PROPS_MAX_BYTES = 100 * 1024
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
CURRENCY = re.compile(r"^[A-Za-z]{3}$")
# yyyy-MM-dd'T'HH:mm:ss:SSSZ, Z as +hhmm, +hh:mm or Z.
COLON_MILLIS = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}):(\d{3})(Z|[+-]\d{2}:?\d{2})$"
)

Ref = tuple[str, Any]


@dataclass
class Counters:
    """Tallies of accepted data since the last reset (see ``GET /_sandbox/counters``)."""

    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    events: int = 0
    purchases: int = 0
    events_by_user: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    attributes_processed: int = 0
    data_points: int = 0
    data_points_by_key: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    skipped_update_existing_only: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of ``GET /_sandbox/counters``."""
        return {
            "requests": dict(self.requests),
            "events": self.events,
            "purchases": self.purchases,
            "events_by_user": {u: dict(n) for u, n in self.events_by_user.items()},
            "attributes_processed": self.attributes_processed,
            "data_points": self.data_points,
            "data_points_by_key": {a: dict(n) for a, n in self.data_points_by_key.items()},
            "skipped_update_existing_only": self.skipped_update_existing_only,
        }


@dataclass(frozen=True)
class Outcome:
    """A handler's answer: HTTP status and JSON body."""

    status: int
    body: dict[str, Any]


def fatal(message: str, errors: list[Any] | None = None) -> Outcome:
    """A 400 with the fatal message repeated in ``errors`` (spec: Errors 1)."""
    return Outcome(400, {"message": message, "errors": [message] if errors is None else errors})


# ---- request shape (shared with the lean path) ---------------------------------------------


def shape(body: Any, settings: SandboxSettings) -> dict[str, list[Any]] | Outcome:
    """The arrays sent, or the fatal outcome (bad shape, or over the object limit)."""
    if not isinstance(body, dict):
        return fatal(NO_VALID, [])
    arrays: dict[str, list[Any]] = {}
    for name in ARRAYS:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            return fatal(f"'{name}' must be an array")
        arrays[name] = value
    total_max, per_array_max = settings.object_limits()
    if total_max is not None and sum(len(v) for v in arrays.values()) > total_max:
        return fatal(MAX_INPUT)
    if per_array_max is not None and any(len(v) > per_array_max for v in arrays.values()):
        return fatal(MAX_INPUT)
    return arrays


def ref_key(ref: Ref) -> str:
    """Counter key of a reference: the external_id, else ``kind:value``."""
    kind, value = ref
    if kind == "external_id":
        return str(value)
    if kind == "user_alias":
        return f"alias:{value['alias_label']}:{value['alias_name']}"
    return f"{kind}:{value}"


# ---- pure validation ---------------------------------------------------------------------


def parse_time(value: Any) -> float | None:
    """Epoch seconds of an ISO 8601 or ``yyyy-MM-dd'T'HH:mm:ss:SSSZ`` string, else None."""
    if not isinstance(value, str) or len(value) < 10:
        return None
    match = COLON_MILLIS.match(value)
    text = f"{match[1]}.{match[2]}{match[3]}" if match else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def is_alias(value: Any) -> bool:
    """A user alias object: string ``alias_name`` and ``alias_label``, both non-empty."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("alias_name"), str)
        and isinstance(value.get("alias_label"), str)
        and bool(value["alias_name"])
        and bool(value["alias_label"])
    )


def reference(item: dict[str, Any]) -> Ref | str:
    """The one user reference of an item, or the item error.

    external_id, user_alias and platform_id exclude each other; without them the email is
    the reference (it wins over the phone), then a valid E.164 phone.
    """
    given = [k for k in REF_KEYS if item.get(k) is not None]
    if len(given) > 1:
        return MULTIPLE_REFS
    if given:
        kind = given[0]
        value = item[kind]
        if kind == "external_id":
            if not isinstance(value, str) or not value:
                return not_valid("external_id")
            if value.strip().lower() in BLACKLIST:
                return BLACKLISTED
        elif kind == "user_alias" and not is_alias(value):
            return not_valid("user_alias")
        elif kind == "platform_id" and (not isinstance(value, str) or not value):
            return not_valid("braze_id")
        return kind, value
    email = item.get("email")
    if email is not None:
        if not isinstance(email, str) or not EMAIL.match(email):
            return not_valid("email")
        return "email", email
    if is_e164(item.get("phone")):
        return "phone", item["phone"]
    return REQUIRED_REF


def may_create(kind: str, update_existing_only: bool | None) -> bool:
    """Whether an absent profile is created (spec: ``_update_existing_only``)."""
    if kind == "platform_id":
        return False
    if kind == "user_alias":
        return update_existing_only is False
    return update_existing_only is not True


def _contains_date(values: list[Any]) -> bool:
    for value in values:
        if isinstance(value, str) and parse_time(value) is not None:
            return True
        if isinstance(value, list) and _contains_date(value):
            return True
    return False


def properties_error(props: Any) -> str | None:
    """The first rule of the event properties object that ``props`` breaks, else None."""
    if not isinstance(props, dict):
        return PROPS_NOT_OBJECT
    nested = False
    for name, value in props.items():
        if not name or len(name) > 255:
            return PROP_NAME
        if name.startswith("$"):
            return PROP_DOLLAR
        if isinstance(value, str):
            if len(value) > 255:
                return PROP_STRING
        elif isinstance(value, list):
            nested = True
            if _contains_date(value):
                return PROP_ARRAY_DATE
        elif isinstance(value, dict):
            nested = True
        elif value is None or not isinstance(value, int | float):
            return PROP_TYPE
    if nested and len(orjson.dumps(props)) > PROPS_MAX_BYTES:
        return PROP_TOO_LARGE
    return None


def _array_operation_error(name: str, value: Any) -> str | None:
    if not is_array_operation(value):
        return None
    for operator, elements in value.items():
        wanted = dict if operator == "update" else str
        if not isinstance(elements, list) or not all(isinstance(e, wanted) for e in elements):
            return not_valid(name)
    return None


def _common_error(item: Any) -> Ref | str:
    if not isinstance(item, dict):
        return NOT_OBJECT
    ref = reference(item)
    if isinstance(ref, str):
        return ref
    flag = item.get("_update_existing_only")
    if flag is not None and not isinstance(flag, bool):
        return BAD_FLAG
    return ref


def attribute_error(item: Any) -> str | None:
    """The error of an attributes object, else None."""
    ref = _common_error(item)
    if isinstance(ref, str):
        return ref
    subscribe = item.get("email_subscribe")
    if subscribe is not None and subscribe not in EMAIL_SUBSCRIBE:
        return BAD_SUBSCRIBE
    groups = item.get("subscription_groups")
    if groups is not None and not (
        isinstance(groups, list)
        and all(
            isinstance(g, dict)
            and isinstance(g.get("subscription_group_id"), str)
            and g.get("subscription_state") in SUB_STATES
            for g in groups
        )
    ):
        return BAD_GROUPS
    return next((e for e in (_array_operation_error(k, v) for k, v in item.items()
                             if k not in NON_ATTRIBUTE_KEYS) if e), None)


def _time_error(item: dict[str, Any]) -> str | None:
    if item.get("time") is None:
        return required("time")
    return None if parse_time(item["time"]) is not None else not_valid("time")


def _optional_string_error(item: dict[str, Any], name: str) -> str | None:
    value = item.get(name)
    return None if value is None or isinstance(value, str) else not_valid(name)


def event_error(item: Any) -> str | None:
    """The error of an event object, else None."""
    ref = _common_error(item)
    if isinstance(ref, str):
        return ref
    name = item.get("name")
    if name is None or name == "":
        return required("name")
    if not isinstance(name, str):
        return not_valid("name")
    return (
        _time_error(item)
        or _optional_string_error(item, "app_id")
        or (properties_error(item["properties"]) if item.get("properties") is not None else None)
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def purchase_error(item: Any) -> str | None:
    """The error of a purchase object, else None.

    Required (a documented choice; the spec does not show it): product_id (string of 1-255
    characters), currency (three letters), price (number), time. quantity is optional, an
    integer from 1 to 100.
    """
    ref = _common_error(item)
    if isinstance(ref, str):
        return ref
    product = item.get("product_id")
    if product is None or product == "":
        return required("product_id")
    if not isinstance(product, str) or len(product) > 255:
        return not_valid("product_id")
    currency = item.get("currency")
    if currency is None:
        return required("currency")
    if not isinstance(currency, str) or not CURRENCY.match(currency):
        return not_valid("currency")
    if item.get("price") is None:
        return required("price")
    if not _is_number(item["price"]):
        return not_valid("price")
    quantity = item.get("quantity")
    if quantity is not None and not (
        isinstance(quantity, int) and not isinstance(quantity, bool) and 1 <= quantity <= 100
    ):
        return BAD_QUANTITY
    return (
        _time_error(item)
        or _optional_string_error(item, "app_id")
        or (properties_error(item["properties"]) if item.get("properties") is not None else None)
    )


VALIDATORS = {"attributes": attribute_error, "events": event_error, "purchases": purchase_error}


# ---- applying ------------------------------------------------------------------------------


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


def apply_attribute(store: ProfileStore, item: dict[str, Any], counters: Counters) -> None:
    """Write one valid attributes object, propagating subscription groups by email."""
    profile = _profile_for(store, item, counters)
    if profile is None:
        return
    ref_kind = reference(item)[0]
    values = {
        k: v
        for k, v in item.items()
        if k not in NON_ATTRIBUTE_KEYS and k != "subscription_groups" and k != ref_kind
    }
    store.apply_attributes(profile, values)
    for group in item.get("subscription_groups") or []:
        store.set_subscription(
            profile, group["subscription_group_id"], group["subscription_state"]
        )
    count_attribute(counters, item, ref_kind)


def count_attribute(counters: Counters, item: dict[str, Any], ref_kind: str) -> None:
    """Count one processed attributes object (also used by the lean path): each key but the
    identifiers and `_update_existing_only` is a billed data point, tallied per key too."""
    counters.attributes_processed += 1
    per_key = counters.data_points_by_key["attributes"]
    for k in item:
        if k not in NON_ATTRIBUTE_KEYS and k != ref_kind:
            counters.data_points += 1
            per_key[k] += 1


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


def count_event(counters: Counters, ref: Ref, name: str) -> None:
    """Count one accepted event (also used by the lean path)."""
    counters.events += 1
    counters.data_points += 1
    counters.data_points_by_key["events"][name] += 1
    counters.events_by_user[ref_key(ref)][name] += 1


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


def count_purchase(counters: Counters, product_id: str) -> None:
    """Count one accepted purchase (also used by the lean path), per product id too."""
    counters.purchases += 1
    counters.data_points += 1
    counters.data_points_by_key["purchases"][product_id] += 1


APPLIERS = {"attributes": apply_attribute, "events": apply_event, "purchases": apply_purchase}


def handle_track(
    body: Any, settings: SandboxSettings, store: ProfileStore, counters: Counters
) -> Outcome:
    """The full /users/track behaviour for an already parsed JSON body."""
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
    for name in ARRAYS:
        for item in valid.get(name, ()):
            APPLIERS[name](store, item, counters)
    result: dict[str, Any] = {"message": "success"}
    for name in ARRAYS:
        if name in arrays:
            result[f"{name}_processed"] = len(valid[name])
    if errors:
        result["errors"] = errors
    return Outcome(201, result)
