"""POST /users/track validation: the request's shape and the first error of each item.

Invariant: every function here is pure (a function of the body or item alone), so the lean
path and the full path agree on what is valid.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson

from engage_sandbox.handlers.outcome import Outcome, fatal
from engage_sandbox.state.settings import SandboxSettings
from engage_sandbox.state.store import is_array_operation, is_e164

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
