"""The service's rules for /users/track objects, as small pure checks.

Every `check_*` function returns None when the value obeys the rule, or a short reason that
names the field or property and the rule broken. A reason never contains the value itself:
values may be personal data, and reasons end up in logs and in the rejected-rows table.
Names (field, column, property and attribute names) are schema, not data, and are quoted,
shortened to `NAME_SHOWN` characters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import date, datetime

import orjson

MAX_EXTERNAL_ID_LENGTH = 512
MAX_PLATFORM_ID_LENGTH = MAX_EXTERNAL_ID_LENGTH
MAX_EMAIL_LENGTH = 254
MAX_PROPERTY_NAME_LENGTH = 255
MAX_STRING_PROPERTY_LENGTH = 255
MAX_PROPERTIES_BYTES = 100_000  # "100 KB"; the decimal reading, so never over either reading
MAX_PRODUCT_ID_LENGTH = 255
MAX_QUANTITY = 100
MAX_ATTRIBUTES_PER_ROW = 250
REQUEST_OVERHEAD_BYTES = 1024  # room for the request envelope around one item
NAME_SHOWN = 40

_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(?:\.[^@\s.]+)+")
_PHONE = re.compile(r"\+[1-9][0-9]{1,14}")
_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}"
    r"(?:T\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?)?"
)
_JAVA = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}):(\d{3})(Z|[+-]\d{4})")
_CURRENCY = re.compile(r"[A-Za-z]{3}")


def name_label(name: object) -> str:
    """A name quoted for a reason, shortened so a reason stays one readable line."""
    text = str(name)
    if len(text) > NAME_SHOWN:
        text = text[:NAME_SHOWN] + "…"
    return f"'{text}'"


def _string_problem(value: object, field: str, max_length: int | None = None) -> str | None:
    if not isinstance(value, str):
        return f"{field} must be a string"
    if not value.strip():
        return f"{field} is empty"
    if max_length is not None and len(value) > max_length:
        return f"{field} is longer than {max_length} characters"
    return None


# --- identifiers -----------------------------------------------------------------------------


def check_external_id(value: object, field: str = "external_id") -> str | None:
    """A non-empty string of at most MAX_EXTERNAL_ID_LENGTH characters."""
    return _string_problem(value, field, MAX_EXTERNAL_ID_LENGTH)


def check_platform_id(value: object, field: str = "platform_id") -> str | None:
    """A non-empty string of at most MAX_PLATFORM_ID_LENGTH characters."""
    return _string_problem(value, field, MAX_PLATFORM_ID_LENGTH)


def check_email(value: object, field: str = "email") -> str | None:
    """A plausible address: one '@', no spaces, a dotted domain, at most 254 characters."""
    problem = _string_problem(value, field, MAX_EMAIL_LENGTH)
    if problem is None and isinstance(value, str) and not _EMAIL.fullmatch(value):
        return f"{field} is not a plausible email address"
    return problem


def check_phone(value: object, field: str = "phone") -> str | None:
    """E.164: '+', then 2 to 15 digits, the first not zero."""
    problem = _string_problem(value, field)
    if problem is None and isinstance(value, str) and not _PHONE.fullmatch(value):
        return f"{field} is not an E.164 phone number ('+' and 2 to 15 digits)"
    return problem


def check_alias(
    name: object, label: object, name_field: str = "alias_name", label_field: str = "alias_label"
) -> str | None:
    """Both alias_name and alias_label are non-empty strings."""
    return _string_problem(name, name_field) or _string_problem(label, label_field)


_IDENTIFIER_CHECKS = {
    "external_id": check_external_id,
    "platform_id": check_platform_id,
    "email": check_email,
    "phone": check_phone,
}


def check_identifier(kind: str, value: object, field: str | None = None) -> str | None:
    """One single-valued identifier (external_id, platform_id, email or phone)."""
    return _IDENTIFIER_CHECKS[kind](value, field or kind)


# --- times -----------------------------------------------------------------------------------


def is_time_string(value: str) -> bool:
    """ISO 8601 (extended form) or `yyyy-MM-dd'T'HH:mm:ss:SSSZ`, and a real calendar time."""
    if _ISO.fullmatch(value):
        text = value
    else:
        java = _JAVA.fullmatch(value)
        if java is None:
            return False
        text = f"{java.group(1)}.{java.group(2)}{java.group(3)}"
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def check_time(value: object, field: str = "time") -> str | None:
    """A time string in one of the two accepted formats."""
    if not isinstance(value, str):
        return f"{field} must be a string in ISO 8601"
    if not is_time_string(value):
        return f"{field} is not ISO 8601 or yyyy-MM-dd'T'HH:mm:ss:SSSZ"
    return None


# --- events ----------------------------------------------------------------------------------


def check_event_name(value: object, field: str = "name") -> str | None:
    """The event name is a non-empty string."""
    return _string_problem(value, field)


def check_app_id(value: object, field: str = "app_id") -> str | None:
    """When given, the app identifier is a non-empty string."""
    return _string_problem(value, field)


def check_property_name(name: object) -> str | None:
    """Non-empty, at most 255 characters, no leading '$'."""
    if not isinstance(name, str) or not name:
        return "a property name is empty or not a string"
    if len(name) > MAX_PROPERTY_NAME_LENGTH:
        return (
            f"property name {name_label(name)} is longer than "
            f"{MAX_PROPERTY_NAME_LENGTH} characters"
        )
    if name[0] == "$":
        return f"property name {name_label(name)} starts with '$'"
    return None


def _holds_time(value: object) -> bool:
    if isinstance(value, datetime | date):
        return True
    if isinstance(value, str):
        return is_time_string(value)
    if isinstance(value, list):
        return any(_holds_time(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_time(v) for v in value.values())
    return False


def check_property_value(name: str, value: object) -> str | None:
    """Number, boolean, string of at most 255 characters (dates included), array, object.

    Arrays may not hold datetimes (objects or date strings), at any depth.
    """
    kind = type(value)
    if kind is str:
        if len(value) > MAX_STRING_PROPERTY_LENGTH:  # type: ignore[arg-type]
            return (
                f"property {name_label(name)} is a string longer than "
                f"{MAX_STRING_PROPERTY_LENGTH} characters"
            )
        return None
    if kind is bool or kind is int or kind is dict:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"property {name_label(name)} is not finite"  # type: ignore[arg-type]
    if kind is list:
        if _holds_time(value):
            return f"property {name_label(name)} is an array holding datetimes"
        return None
    if value is None:
        return f"property {name_label(name)} is null"
    return f"property {name_label(name)} has a value of unsupported type {kind.__name__}"


def check_properties(properties: object, field: str = "properties") -> str | None:
    """An object of valid names and values; at most 100 KB when it holds arrays or objects."""
    if not isinstance(properties, dict):
        return f"{field} must be an object"
    nested = False
    for name, value in properties.items():
        kind = type(value)
        short = kind is str and len(value) <= MAX_STRING_PROPERTY_LENGTH
        if (
            (short or kind is int or kind is bool)
            and type(name) is str and 0 < len(name) <= MAX_PROPERTY_NAME_LENGTH and name[0] != "$"
        ):
            continue  # the common case, checked inline
        problem = check_property_name(name) or check_property_value(name, value)
        if problem is not None:
            return problem
        nested = nested or kind is list or kind is dict
    if nested and len(orjson.dumps(properties)) > MAX_PROPERTIES_BYTES:
        return f"{field} with arrays or objects is larger than {MAX_PROPERTIES_BYTES} bytes"
    return None


# --- purchases -------------------------------------------------------------------------------


def check_product_id(value: object, field: str = "product_id") -> str | None:
    """A non-empty string of at most 255 characters."""
    return _string_problem(value, field, MAX_PRODUCT_ID_LENGTH)


def check_currency(value: object, field: str = "currency") -> str | None:
    """A three-letter alphabetic currency code (ISO 4217 shape)."""
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        return f"{field} is not a three-letter currency code"
    return None


def _finite_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def check_price(value: object, field: str = "price") -> str | None:
    """A finite number."""
    if _finite_number(value) is None:
        return f"{field} must be a finite number"
    return None


def check_quantity(value: object, field: str = "quantity") -> str | None:
    """An integer from 1 to 100 (an integral float counts)."""
    number = _finite_number(value)
    if number is None or number != int(number):
        return f"{field} must be an integer"
    if not 1 <= number <= MAX_QUANTITY:
        return f"{field} must be from 1 to {MAX_QUANTITY}"
    return None


# --- attributes ------------------------------------------------------------------------------


def check_attribute_name(name: object, reserved: frozenset[str] = frozenset()) -> str | None:
    """A non-empty string, not starting with '$', not a field the object already uses."""
    if not isinstance(name, str) or not name:
        return "an attribute name is empty or not a string"
    if name[0] == "$":
        return f"attribute name {name_label(name)} starts with '$'"
    if name in reserved:
        return f"attribute name {name_label(name)} is reserved for the user reference"
    return None


ARRAY_OPERATORS = frozenset({"add", "remove", "update"})
"""An attribute value that is an object of only these keys edits an array attribute: `add` and
`remove` take arrays of strings, `update` an array of objects (the service refuses any other
shape with an item error for the object, and one such object used to cost its whole request)."""


def check_array_operation(name: str, value: dict[object, object]) -> str | None:
    """Every operator of an array operation holds an array of the elements it takes."""
    for operator, elements in value.items():
        wanted, what = (dict, "objects") if operator == "update" else (str, "strings")
        if type(elements) is not list or not all(type(e) is wanted for e in elements):
            return f"attribute {name_label(name)}: '{operator}' must be an array of {what}"
    return None


EMAIL_SUBSCRIBE_STATES = ("opted_in", "subscribed", "unsubscribed")


def check_email_subscribe(value: object) -> str | None:
    """Null (unset) or one of EMAIL_SUBSCRIBE_STATES."""
    if value is None or value in EMAIL_SUBSCRIBE_STATES:
        return None
    return "email_subscribe must be 'opted_in', 'subscribed' or 'unsubscribed'"


def check_subscription_groups(value: object) -> str | None:
    """An array of objects, each a group id and a state the service takes."""
    if type(value) is list and all(
            type(g) is dict and check_group_id(g.get("subscription_group_id")) is None
            and check_subscription_state(g.get("subscription_state")) is None for g in value):
        return None
    return ("subscription_groups must be an array of objects with a subscription_group_id "
            "and a subscription_state ('subscribed' or 'unsubscribed')")


def check_attribute_value(name: str, value: object) -> str | None:
    """String, boolean, integer, finite float, array, object, or null (which unsets); an
    object of only ARRAY_OPERATORS keys must be a well-formed array operation; the fields in
    FIELD_CHECKS (standard attributes with a fixed shape) obey their own rule."""
    field_check = FIELD_CHECKS.get(name)
    if field_check is not None:
        return field_check(value)
    if isinstance(value, dict):
        if value and value.keys() <= ARRAY_OPERATORS:
            return check_array_operation(name, value)
        return None
    kind = type(value)
    if value is None or kind is str or kind is bool or kind is int or kind is list:
        return None
    if kind is float:
        return None if math.isfinite(value) else f"attribute {name_label(name)} is not finite"  # type: ignore[arg-type]
    return f"attribute {name_label(name)} has a value of unsupported type {kind.__name__}"


def check_attribute_count(count: int) -> str | None:
    """At most 250 attributes per row (the service's own sync limit)."""
    if count > MAX_ATTRIBUTES_PER_ROW:
        return f"more than {MAX_ATTRIBUTES_PER_ROW} attributes in one row"
    return None


def check_blob_size(size: int, max_body_bytes: int) -> str | None:
    """One serialized item must fit in a request with room for the envelope."""
    limit = max_body_bytes - REQUEST_OVERHEAD_BYTES
    if size > limit:
        return f"the object is larger than {limit} bytes and cannot fit in a request"
    return None


# --- subscriptions and identity operations ---------------------------------------------------

SUBSCRIPTION_STATES = ("subscribed", "unsubscribed")
PRIORITIES = ("identified", "unidentified", "most_recently_updated")
MAX_GROUP_ID_LENGTH = 255  # a generous bound: ids are UUIDs in practice


def check_subscription_state(value: object, field: str = "subscription_state") -> str | None:
    """Exactly 'subscribed' or 'unsubscribed' (case and spaces matter to the service)."""
    if value not in SUBSCRIPTION_STATES:
        return f"{field} must be 'subscribed' or 'unsubscribed'"
    return None


def check_group_id(value: object, field: str = "subscription_group_id") -> str | None:
    """A non-empty string of at most MAX_GROUP_ID_LENGTH characters."""
    return _string_problem(value, field, MAX_GROUP_ID_LENGTH)


def check_prioritization(value: object, field: str = "prioritization") -> str | None:
    """A non-empty sequence of PRIORITIES, none twice, at most one of identified/unidentified."""
    if not isinstance(value, list | tuple) or not value:
        return f"{field} must list at least one value"
    if any(v not in PRIORITIES for v in value):
        return f"{field} holds a value other than identified, unidentified, most_recently_updated"
    if len(set(value)) != len(value):
        return f"{field} lists a value twice"
    if "identified" in value and "unidentified" in value:
        return f"{field} may hold at most one of 'identified' and 'unidentified'"
    return None


FIELD_CHECKS: dict[str, Callable[[object], str | None]] = {
    "email_subscribe": check_email_subscribe,
    "subscription_groups": check_subscription_groups,
}
"""Attributes objects' standard fields whose values the service checks (an item error)."""
