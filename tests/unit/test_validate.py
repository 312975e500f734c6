"""The spec's rules, one table per rule: accepted values give None, rejected ones a reason."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import pytest

from engage_sync import validate as v

Check = Callable[[Any], str | None]

ACCEPTED: list[tuple[str, Check, Any]] = [
    ("external_id", v.check_external_id, "user-1"),
    ("external_id at max length", v.check_external_id, "x" * v.MAX_EXTERNAL_ID_LENGTH),
    ("platform_id", v.check_platform_id, "5f0e1c2b3a"),
    ("email", v.check_email, "a.b+tag@example.co.uk"),
    ("phone shortest", v.check_phone, "+12"),
    ("phone longest", v.check_phone, "+" + "1" * 15),
    ("phone", v.check_phone, "+15551234567"),
    ("event name", v.check_event_name, "played song"),
    ("app_id", v.check_app_id, "app-1"),
    ("time Z", v.check_time, "2024-01-02T03:04:05Z"),
    ("time fraction", v.check_time, "2024-01-02T03:04:05.123Z"),
    ("time offset", v.check_time, "2024-01-02T03:04:05+02:00"),
    ("time no zone", v.check_time, "2024-01-02T03:04:05"),
    ("time minutes only", v.check_time, "2024-01-02T03:04Z"),
    ("time date only", v.check_time, "2024-01-02"),
    ("time java format", v.check_time, "2013-02-04T11:31:00:000-0500"),
    ("time java format Z", v.check_time, "2013-02-04T11:31:00:000Z"),
    ("product_id", v.check_product_id, "sku-1"),
    ("product_id at max", v.check_product_id, "p" * 255),
    ("currency", v.check_currency, "USD"),
    ("currency lower", v.check_currency, "eur"),
    ("price int", v.check_price, 3),
    ("price float", v.check_price, 9.99),
    ("price zero", v.check_price, 0),
    ("quantity 1", v.check_quantity, 1),
    ("quantity 100", v.check_quantity, 100),
    ("quantity integral float", v.check_quantity, 2.0),
    ("property name", v.check_property_name, "color"),
    ("property name at max", v.check_property_name, "n" * 255),
    ("attribute name", v.check_attribute_name, "first_name"),
    ("attribute count at max", v.check_attribute_count, v.MAX_ATTRIBUTES_PER_ROW),
]

REJECTED: list[tuple[str, Check, Any, str]] = [
    ("external_id empty", v.check_external_id, "", "external_id is empty"),
    ("external_id blank", v.check_external_id, "  ", "external_id is empty"),
    ("external_id number", v.check_external_id, 12.5, "external_id must be a string"),
    ("external_id too long", v.check_external_id, "x" * (v.MAX_EXTERNAL_ID_LENGTH + 1),
     "longer than 512"),
    ("platform_id empty", v.check_platform_id, "", "platform_id is empty"),
    ("email no at", v.check_email, "user.example.com", "not a plausible email"),
    ("email two ats", v.check_email, "a@b@example.com", "not a plausible email"),
    ("email space", v.check_email, "a b@example.com", "not a plausible email"),
    ("email no dot in domain", v.check_email, "a@localhost", "not a plausible email"),
    ("email empty local part", v.check_email, "@example.com", "not a plausible email"),
    ("email too long", v.check_email, "a" * 250 + "@x.com", "longer than 254"),
    ("phone no plus", v.check_phone, "15551234567", "E.164"),
    ("phone leading zero", v.check_phone, "+0555123", "E.164"),
    ("phone one digit", v.check_phone, "+1", "E.164"),
    ("phone sixteen digits", v.check_phone, "+" + "1" * 16, "E.164"),
    ("phone with spaces", v.check_phone, "+1 555 123 4567", "E.164"),
    ("phone number type", v.check_phone, 15551234567, "must be a string"),
    ("event name empty", v.check_event_name, "", "name is empty"),
    ("event name number", v.check_event_name, 7, "name must be a string"),
    ("app_id empty", v.check_app_id, "", "app_id is empty"),
    ("time space separator", v.check_time, "2024-01-02 03:04:05", "not ISO 8601"),
    ("time not a date", v.check_time, "yesterday", "not ISO 8601"),
    ("time day out of range", v.check_time, "2024-02-30T00:00:00Z", "not ISO 8601"),
    ("time hour out of range", v.check_time, "2024-01-02T24:00:00Z", "not ISO 8601"),
    ("time java bad millis", v.check_time, "2013-02-04T11:31:00:00-0500", "not ISO 8601"),
    ("time epoch number", v.check_time, 1700000000, "must be a string"),
    ("product_id empty", v.check_product_id, "", "product_id is empty"),
    ("product_id too long", v.check_product_id, "p" * 256, "longer than 255"),
    ("product_id number", v.check_product_id, 5, "must be a string"),
    ("currency two letters", v.check_currency, "US", "three-letter"),
    ("currency digits", v.check_currency, "U5D", "three-letter"),
    ("currency number", v.check_currency, 840, "three-letter"),
    ("price string", v.check_price, "9.99", "finite number"),
    ("price bool", v.check_price, True, "finite number"),
    ("price nan", v.check_price, float("nan"), "finite number"),
    ("price infinite", v.check_price, float("inf"), "finite number"),
    ("quantity zero", v.check_quantity, 0, "from 1 to 100"),
    ("quantity 101", v.check_quantity, 101, "from 1 to 100"),
    ("quantity fraction", v.check_quantity, 1.5, "must be an integer"),
    ("quantity string", v.check_quantity, "2", "must be an integer"),
    ("quantity bool", v.check_quantity, True, "must be an integer"),
    ("property name empty", v.check_property_name, "", "empty"),
    ("property name dollar", v.check_property_name, "$color", "starts with '$'"),
    ("property name too long", v.check_property_name, "n" * 256, "longer than 255"),
    ("property name not text", v.check_property_name, 5, "not a string"),
    ("attribute name empty", v.check_attribute_name, "", "empty"),
    ("attribute name dollar", v.check_attribute_name, "$x", "starts with '$'"),
    ("attribute count over", v.check_attribute_count, v.MAX_ATTRIBUTES_PER_ROW + 1,
     "more than 250"),
]


@pytest.mark.parametrize(("case", "check", "value"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted(case: str, check: Check, value: Any) -> None:
    assert check(value) is None


@pytest.mark.parametrize(
    ("case", "check", "value", "expected"), REJECTED, ids=[c[0] for c in REJECTED]
)
def test_rejected(case: str, check: Check, value: Any, expected: str) -> None:
    reason = check(value)
    assert reason is not None
    assert expected in reason


@pytest.mark.parametrize(
    ("check", "value"),
    [
        (v.check_external_id, "secret-user-" + "9" * 600),
        (v.check_email, "secret-person@nowhere"),
        (v.check_phone, "+0secret555"),
        (v.check_platform_id, "   "),
        (v.check_time, "secret-time-2024"),
        (v.check_product_id, "secret-product-" + "x" * 300),
        (v.check_currency, "secretcurrency"),
        (v.check_quantity, 12345),
    ],
)
def test_reasons_never_show_the_value(check: Check, value: Any) -> None:
    reason = check(value)
    assert reason is not None
    assert str(value).strip() not in reason or not str(value).strip()
    assert "secret" not in reason


def test_field_names_appear_in_reasons() -> None:
    assert v.check_external_id("", "EXTERNAL_ID") == "EXTERNAL_ID is empty"
    assert v.check_identifier("email", "nope", "EMAIL") == "EMAIL is not a plausible email address"
    assert v.check_identifier("phone", "+15551234567", "PHONE") is None


@pytest.mark.parametrize(
    ("name", "label"),
    [("x", None), ("", "y"), ("x", ""), (None, "y"), ("x", 3)],
)
def test_alias_needs_both_parts(name: Any, label: Any) -> None:
    if name == "x" and label is None:
        assert v.check_alias(name, "label") is None
        return
    assert v.check_alias(name, label) is not None


PROPERTY_VALUES_OK: list[tuple[str, Any]] = [
    ("int", 3),
    ("float", 2.5),
    ("bool", False),
    ("string at max", "s" * 255),
    ("date string", "2024-01-02T03:04:05Z"),
    ("array of strings", ["a", "b"]),
    ("array of numbers", [1, 2.5]),
    ("object", {"nested": {"deep": [1, 2]}}),
    ("object holding a date", {"when": "2024-01-02T03:04:05Z"}),
]

PROPERTY_VALUES_BAD: list[tuple[str, Any, str]] = [
    ("string too long", "s" * 256, "longer than 255"),
    ("nan", float("nan"), "not finite"),
    ("array with date string", ["2024-01-02T03:04:05Z"], "array holding datetimes"),
    ("array with java date", ["2013-02-04T11:31:00:000-0500"], "array holding datetimes"),
    ("array with datetime", [datetime(2024, 1, 2, tzinfo=UTC)], "array holding datetimes"),
    ("array with date object", [date(2024, 1, 2)], "array holding datetimes"),
    ("nested array with date", [["2024-01-02"]], "array holding datetimes"),
    ("null", None, "is null"),
    ("bytes", b"raw", "unsupported type bytes"),
]


@pytest.mark.parametrize(
    ("case", "value"), PROPERTY_VALUES_OK, ids=[c[0] for c in PROPERTY_VALUES_OK]
)
def test_property_value_accepted(case: str, value: Any) -> None:
    assert v.check_property_value("p", value) is None
    assert v.check_properties({"p": value}) is None


@pytest.mark.parametrize(
    ("case", "value", "expected"), PROPERTY_VALUES_BAD, ids=[c[0] for c in PROPERTY_VALUES_BAD]
)
def test_property_value_rejected(case: str, value: Any, expected: str) -> None:
    reason = v.check_property_value("prop_name", value)
    assert reason is not None
    assert expected in reason
    assert "'prop_name'" in reason
    assert v.check_properties({"prop_name": value}) == reason


def test_properties_must_be_an_object() -> None:
    assert v.check_properties(["a"]) == "properties must be an object"
    assert v.check_properties({}) is None


def test_properties_with_bad_name_name_the_rule() -> None:
    assert v.check_properties({"$x": 1}) == "property name '$x' starts with '$'"


def test_properties_size_cap_applies_only_with_arrays_or_objects() -> None:
    flat = {f"p{i}": "s" * 255 for i in range(500)}  # ~135 KB of plain strings: allowed
    assert v.check_properties(flat) is None
    nested = {**flat, "list": [1]}
    reason = v.check_properties(nested)
    assert reason is not None
    assert "larger than 100000 bytes" in reason
    small_nested = {"list": list(range(100)), "obj": {"a": 1}}
    assert v.check_properties(small_nested) is None


def test_long_names_are_shortened_in_reasons() -> None:
    reason = v.check_property_name("n" * 300)
    assert reason is not None
    assert "n" * (v.NAME_SHOWN + 1) not in reason


ATTRIBUTE_VALUES: list[tuple[Any, bool]] = [
    ("text", True), (True, True), (3, True), (2.5, True), (["a", 1], True),
    ({"a": {"b": 1}}, True), (None, True), (float("inf"), False), (b"x", False),
    (date(2024, 1, 2), False),
]


@pytest.mark.parametrize(("value", "ok"), ATTRIBUTE_VALUES)
def test_attribute_values(value: Any, ok: bool) -> None:
    reason = v.check_attribute_value("attr", value)
    assert (reason is None) is ok
    if not ok:
        assert reason is not None
        assert "'attr'" in reason


ARRAY_OPERATIONS: list[tuple[Any, str | None]] = [
    ({"add": ["a"], "remove": ["b"]}, None),
    ({"add": []}, None),
    ({"update": [{"id": 1, "name": "rex"}]}, None),
    ({"add": 5}, "attribute 'tags': 'add' must be an array of strings"),
    ({"add": "abc"}, "attribute 'tags': 'add' must be an array of strings"),
    ({"remove": None}, "attribute 'tags': 'remove' must be an array of strings"),
    ({"add": ["a", 1]}, "attribute 'tags': 'add' must be an array of strings"),
    ({"add": [["a"]]}, "attribute 'tags': 'add' must be an array of strings"),
    ({"remove": [{"a": 1}]}, "attribute 'tags': 'remove' must be an array of strings"),
    ({"update": ["a"]}, "attribute 'tags': 'update' must be an array of objects"),
    ({"update": {"id": 1}}, "attribute 'tags': 'update' must be an array of objects"),
    ({"add": ["a"], "update": [[]]}, "attribute 'tags': 'update' must be an array of objects"),
    ({"add": 5, "other": 1}, None),  # not only operators: a nested object, sent as it is
    ({}, None),
]


@pytest.mark.parametrize(("value", "reason"), ARRAY_OPERATIONS)
def test_array_operations(value: Any, reason: str | None) -> None:
    """Array operators take arrays of strings (add, remove) or objects
    (update); the reason names the attribute and the operator, never the value."""
    assert v.check_attribute_value("tags", value) == reason


def test_reserved_attribute_names() -> None:
    reserved = frozenset({"external_id"})
    reason = v.check_attribute_name("external_id", reserved)
    assert reason is not None
    assert "reserved" in reason
    assert v.check_attribute_name("email", reserved) is None


@pytest.mark.parametrize(
    ("size", "ok"),
    [(10_000 - v.REQUEST_OVERHEAD_BYTES, True), (10_000 - v.REQUEST_OVERHEAD_BYTES + 1, False)],
)
def test_blob_must_fit_in_a_request(size: int, ok: bool) -> None:
    assert (v.check_blob_size(size, 10_000) is None) is ok


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("2024-01-02T03:04:05,5Z", True),
        ("2024-01-02T03:04:05.123456789+05:30", True),
        ("2024-13-02T00:00:00Z", False),
        ("2024-01-02T", False),
        ("20240102T030405Z", False),
        ("2024-01-02T03:04:05:123-05:00", False),
    ],
)
def test_time_string_shapes(text: str, ok: bool) -> None:
    assert v.is_time_string(text) is ok
