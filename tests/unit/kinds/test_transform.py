"""transform_batch: both row formats, all three kinds, rejects, nulls, times, row accounting."""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest

from engage_sync.config.files import parse_integration
from engage_sync.config.integration import Integration
from engage_sync.errors import SourceError
from engage_sync.items import TransformResult, render_key
from engage_sync.kinds.track_transform import iso_utc, transform_batch

T0 = datetime(2024, 1, 2, 3, 4, 5)
T0_ISO = "2024-01-02T03:04:05Z"


def integration(kind: str = "attributes", **raw: Any) -> Integration:
    return parse_integration({"kind": kind, "source": {"table": "t"}, **raw}, file="t.yaml")


def batch(**columns: Any) -> pa.RecordBatch:
    arrays = {
        name: values if isinstance(values, pa.Array) else pa.array(values)
        for name, values in columns.items()
    }
    return pa.record_batch(arrays)


def times(n: int) -> pa.Array:
    return pa.array([T0 + timedelta(seconds=i) for i in range(n)], pa.timestamp("us"))


def payloads(*objects: Any) -> list[str | None]:
    return [None if o is None else orjson.dumps(o).decode() for o in objects]


def objects(result: TransformResult) -> list[dict[str, Any]]:
    return [orjson.loads(item.blob) for item in result.items]


def assert_accounted(result: TransformResult, rows: int, first_seq: int) -> None:
    seqs = sorted([i.seq for i in result.items] + [r.seq for r in result.rejects])
    assert seqs == list(range(first_seq, first_seq + rows))


# --- attributes, payload format --------------------------------------------------------------


def test_payload_attributes_become_attribute_objects() -> None:
    rows = batch(
        UPDATED_AT=times(2),
        EXTERNAL_ID=["u1", "u2"],
        PAYLOAD=payloads({"plan": "gold", "score": 3, "tags": ["a"]}, {"plan": None}),
    )
    result = transform_batch(integration(), rows, 10)
    assert result.rejects == []
    assert objects(result) == [
        {"external_id": "u1", "plan": "gold", "score": 3, "tags": ["a"]},
        {"external_id": "u2", "plan": None},
    ]
    first = result.items[0]
    assert (first.seq, first.key, first.user) == (10, "u1", "external_id:u1")
    assert first.array == "attributes"
    assert result.items[1].seq == 11


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("{not json", "PAYLOAD is not valid JSON"),
        ("[1, 2]", "PAYLOAD is not a JSON object"),
        (None, "PAYLOAD is missing (NULL)"),
        ('{"$secret": 1}', "attribute name '$secret' starts with '$'"),
        ('{"external_id": "other"}', "attribute name 'external_id' is reserved"),
        ('{"_update_existing_only": true}', "is reserved"),
        ('{"": 1}', "an attribute name is empty"),
    ],
)
def test_bad_payloads_are_rejected_with_key_and_reason(payload: str | None, reason: str) -> None:
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=["u1"], PAYLOAD=pa.array([payload], pa.string()))
    result = transform_batch(integration(), rows, 0)
    assert result.items == []
    (reject,) = result.rejects
    assert (reject.seq, reject.key) == (0, "u1")
    assert reason in reject.reason


def test_too_many_attributes_in_one_row() -> None:
    payload = orjson.dumps({f"a{i}": i for i in range(251)}).decode()
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=["u1"], PAYLOAD=[payload])
    (reject,) = transform_batch(integration(), rows, 0).rejects
    assert "more than 250 attributes" in reject.reason


@pytest.mark.parametrize(
    ("identifier", "reason"),
    [(None, "EXTERNAL_ID is missing (NULL)"), ("", "EXTERNAL_ID is empty")],
)
def test_missing_identifier_is_rejected(identifier: str | None, reason: str) -> None:
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=pa.array([identifier], pa.string()),
                 PAYLOAD=payloads({"a": 1}))
    (reject,) = transform_batch(integration(), rows, 5).rejects
    assert reject.reason == reason
    assert reject.seq == 5


@pytest.mark.parametrize(
    ("kind", "columns", "field", "value", "user"),
    [
        ("email", {"EMAIL": ["Ann@Example.COM"]}, "email", "Ann@Example.COM",
         "email:ann@example.com"),
        ("phone", {"PHONE": ["+15551234567"]}, "phone", "+15551234567", "phone:+15551234567"),
        ("platform_id", {"BRAZE_ID": ["p-1"]}, "platform_id", "p-1", "platform_id:p-1"),
    ],
)
def test_payload_identifier_columns(
    kind: str, columns: dict[str, list[str]], field: str, value: str, user: str
) -> None:
    rows = batch(UPDATED_AT=times(1), **columns, PAYLOAD=payloads({"plan": "gold"}))
    result = transform_batch(integration(payload={"identifier": kind}), rows, 0)
    assert objects(result) == [{field: value, "plan": "gold"}]
    assert result.items[0].user == user


def test_alias_attributes_create_alias_only_profiles() -> None:
    rows = batch(UPDATED_AT=times(1), ALIAS_NAME=["n1"], ALIAS_LABEL=["crm"],
                 PAYLOAD=payloads({"plan": "gold"}))
    result = transform_batch(integration(payload={"identifier": "user_alias"}), rows, 0)
    assert objects(result) == [{
        "user_alias": {"alias_name": "n1", "alias_label": "crm"},
        "plan": "gold",
        "_update_existing_only": False,
    }]
    assert result.items[0].user == "user_alias:crm:n1"
    assert result.items[0].key == "n1|crm"


def test_alias_with_a_missing_part_is_rejected() -> None:
    rows = batch(UPDATED_AT=times(1), ALIAS_NAME=["n1"], ALIAS_LABEL=pa.array([None], pa.string()),
                 PAYLOAD=payloads({"plan": "gold"}))
    (reject,) = transform_batch(integration(payload={"identifier": "user_alias"}), rows, 0).rejects
    assert reject.reason == "ALIAS_LABEL is missing (NULL)"


@pytest.mark.parametrize(("setting", "expected"), [(True, True), (False, False), (None, None)])
def test_update_existing_only_follows_the_integration(
    setting: bool | None, expected: bool | None
) -> None:
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=["u1"], PAYLOAD=payloads({"a": 1}))
    (obj,) = objects(transform_batch(integration(update_existing_only=setting), rows, 0))
    assert obj.get("_update_existing_only") == expected
    assert ("_update_existing_only" in obj) is (expected is not None)


def test_alias_keeps_an_explicit_update_existing_only() -> None:
    rows = batch(UPDATED_AT=times(1), ALIAS_NAME=["n1"], ALIAS_LABEL=["crm"],
                 PAYLOAD=payloads({"a": 1}))
    config = integration(payload={"identifier": "user_alias"}, update_existing_only=True)
    (obj,) = objects(transform_batch(config, rows, 0))
    assert obj["_update_existing_only"] is True


def test_an_object_too_large_for_a_request_is_rejected() -> None:
    config = integration(service={"limits": {"max_body_bytes": 10_000}})
    rows = batch(UPDATED_AT=times(2), EXTERNAL_ID=["u1", "u2"],
                 PAYLOAD=payloads({"bio": "x" * 9_000}, {"bio": "short"}))
    result = transform_batch(config, rows, 0)
    (reject,) = result.rejects
    assert reject.seq == 0
    assert "larger than 8976 bytes" in reject.reason
    assert [i.seq for i in result.items] == [1]


# --- attributes, mapped format ---------------------------------------------------------------


MAPPED = {
    "identifier": {"external_id": "USER_ID"},
    "attributes": {"FIRST": "first_name", "SEEN": "last_seen", "BORN": "dob", "LTV": "ltv",
                   "N": "n"},
}


def test_mapped_attributes_convert_arrow_types() -> None:
    rows = batch(
        UPDATED_AT=times(2),
        USER_ID=pa.array([7, 8], pa.int64()),
        FIRST=pa.array(["Ann", None]),
        SEEN=pa.array([datetime(2024, 5, 6, 7, 8, 9, 120000), None], pa.timestamp("ms")),
        BORN=pa.array([date(1990, 1, 2), None], pa.date32()),
        LTV=pa.array([Decimal("12.50"), None], pa.decimal128(10, 2)),
        N=pa.array([1, None], pa.int64()),
    )
    result = transform_batch(integration(mapping=MAPPED), rows, 0)
    assert objects(result) == [
        {"external_id": "7", "first_name": "Ann", "last_seen": "2024-05-06T07:08:09.120Z",
         "dob": "1990-01-02", "ltv": 12.5, "n": 1},
        {"external_id": "8", "first_name": None, "last_seen": None, "dob": None, "ltv": None,
         "n": None},
    ]
    assert [i.key for i in result.items] == ["7", "8"]


def test_mapped_attribute_values_of_bad_types_are_rejected() -> None:
    mapping = {"identifier": {"external_id": "USER_ID"},
               "attributes": {"SCORE": "score", "RAW": "raw"}}
    rows = batch(
        UPDATED_AT=times(3),
        USER_ID=["u1", "u2", "u3"],
        SCORE=pa.array([1.5, float("nan"), 2.0]),
        RAW=pa.array([None, None, b"\x00"], pa.binary()),
    )
    result = transform_batch(integration(mapping=mapping), rows, 0)
    assert [i.seq for i in result.items] == [0]
    assert [(r.seq, r.key, r.reason) for r in result.rejects] == [
        (1, "u2", "attribute 'score' is not finite"),
        (2, "u3", "attribute 'raw' has a value of unsupported type bytes"),
    ]


def test_malformed_array_operations_are_rejected_per_row() -> None:
    """A payload or a struct column holding {"add": <not an array of
    strings>} is rejected with a reason naming the attribute, before packing; the rows around
    it are sent."""
    rows = batch(UPDATED_AT=times(4), EXTERNAL_ID=["u1", "u2", "u3", "u4"],
                 PAYLOAD=payloads({"tags": {"add": ["a"]}}, {"tags": {"add": 5}},
                                  {"pets": {"update": ["x"]}}, {"tags": {"remove": ["a"]}}))
    result = transform_batch(integration(), rows, 0)
    assert [i.seq for i in result.items] == [0, 3]
    assert [(r.seq, r.reason) for r in result.rejects] == [
        (1, "attribute 'tags': 'add' must be an array of strings"),
        (2, "attribute 'pets': 'update' must be an array of objects"),
    ]
    mapping = {"identifier": {"external_id": "USER_ID"}, "attributes": {"OPS": "tags"}}
    ops = pa.array([{"add": ["a"]}, {"add": None}], pa.struct([("add", pa.list_(pa.string()))]))
    result = transform_batch(integration(mapping=mapping),
                             batch(UPDATED_AT=times(2), USER_ID=["u1", "u2"], OPS=ops), 0)
    assert [(r.seq, r.reason) for r in result.rejects] == [
        (1, "attribute 'tags': 'add' must be an array of strings")]


def test_standard_fields_of_a_fixed_shape_are_checked_per_row() -> None:
    """email_subscribe and subscription_groups are checked in payloads and in mapped string
    columns, which are otherwise sent as they are."""
    rows = batch(UPDATED_AT=times(3), EXTERNAL_ID=["u1", "u2", "u3"],
                 PAYLOAD=payloads({"email_subscribe": "opted_in"}, {"email_subscribe": "yes"},
                                  {"subscription_groups": [{"subscription_group_id": "g"}]}))
    result = transform_batch(integration(), rows, 0)
    assert [(r.seq, r.reason.split(" must")[0]) for r in result.rejects] == [
        (1, "email_subscribe"), (2, "subscription_groups")]
    mapping = {"identifier": {"external_id": "USER_ID"}, "attributes": {"SUB": "email_subscribe"}}
    result = transform_batch(integration(mapping=mapping), batch(
        UPDATED_AT=times(2), USER_ID=["u1", "u2"], SUB=["Subscribed", "subscribed"]), 0)
    assert [(r.seq, r.key) for r in result.rejects] == [(0, "u1")]


def test_mapped_attribute_name_with_dollar_rejects_every_row() -> None:
    mapping = {"identifier": {"email": "MAIL"}, "attributes": {"A": "$bad"}}
    rows = batch(UPDATED_AT=times(2), MAIL=["a@x.io", "b@x.io"], A=[1, 2])
    result = transform_batch(integration(mapping=mapping), rows, 0)
    assert result.items == []
    assert {r.reason for r in result.rejects} == {"attribute name '$bad' starts with '$'"}


def test_a_configured_column_missing_from_the_batch_raises() -> None:
    rows = batch(UPDATED_AT=times(1), USER_ID=["u1"])
    with pytest.raises(SourceError, match="FIRST"):
        transform_batch(integration(mapping=MAPPED), rows, 0)


# --- events ----------------------------------------------------------------------------------


def test_payload_events_default_time_to_the_cursor() -> None:
    rows = batch(
        UPDATED_AT=times(2),
        EXTERNAL_ID=["u1", "u2"],
        PAYLOAD=payloads(
            {"name": "played", "properties": {"song": "s1", "n": 2, "gone": None}},
            {"name": "paused", "time": "2023-12-31T23:59:59.5Z", "app_id": "app-1"},
        ),
    )
    result = transform_batch(integration("events"), rows, 0)
    assert result.rejects == []
    assert objects(result) == [
        {"external_id": "u1", "name": "played", "time": T0_ISO,
         "properties": {"song": "s1", "n": 2}},
        {"external_id": "u2", "app_id": "app-1", "name": "paused",
         "time": "2023-12-31T23:59:59.5Z"},
    ]
    assert {i.array for i in result.items} == {"events"}
    assert [i.key for i in result.items] == [
        "u1|" + sha1_part(rows.column(2)[0].as_py()),
        "u2|" + sha1_part(rows.column(2)[1].as_py()),
    ]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"time": "2024-01-02T00:00:00Z"}, "PAYLOAD.name is missing"),
        ({"name": ""}, "PAYLOAD.name is empty"),
        ({"name": "e", "time": "02/01/2024"}, "PAYLOAD.time is not ISO 8601"),
        ({"name": "e", "time": 1700000000}, "PAYLOAD.time must be a string"),
        ({"name": "e", "nme": "typo"}, "PAYLOAD key 'nme' is not a field of an event"),
        ({"name": "e", "properties": [1]}, "PAYLOAD.properties must be an object"),
        ({"name": "e", "properties": {"$p": 1}}, "property name '$p' starts with '$'"),
        ({"name": "e", "properties": {"p": "x" * 256}}, "property 'p' is a string longer"),
        ({"name": "e", "properties": {"p": ["2024-01-02T00:00:00Z"]}}, "array holding datetimes"),
        ({"name": "e", "app_id": ""}, "PAYLOAD.app_id is empty"),
    ],
)
def test_bad_events_are_rejected(payload: dict[str, Any], reason: str) -> None:
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=["u1"], PAYLOAD=payloads(payload))
    result = transform_batch(integration("events"), rows, 3)
    assert result.items == []
    (reject,) = result.rejects
    assert reject.seq == 3
    assert reject.key.startswith("u1|")
    assert reason in reject.reason


@pytest.mark.parametrize(
    ("payload", "reason"),
    [("{not json", "PAYLOAD is not valid JSON"), ("[1, 2]", "PAYLOAD is not a JSON object"),
     ('"e"', "PAYLOAD is not a JSON object"), (None, "PAYLOAD is missing (NULL)")],
)
def test_event_payloads_that_are_not_objects_are_rejected_the_rest_kept(
        payload: str | None, reason: str) -> None:
    """Parsed inline for the common case; what is wrong said by `parse_payload`."""
    good = payloads({"name": "e"})[0]
    rows = batch(UPDATED_AT=times(3), EXTERNAL_ID=["u1", "u2", "u3"],
                 PAYLOAD=pa.array([good, payload, good], pa.string()))
    result = transform_batch(integration("events"), rows, 0)
    assert [(r.seq, r.reason) for r in result.rejects] == [(1, reason)]
    assert [i.seq for i in result.items] == [0, 2]


def test_events_cannot_be_identified_by_phone() -> None:
    rows = batch(UPDATED_AT=times(2), PHONE=["+15551234567", None],
                 PAYLOAD=payloads({"name": "e"}, {"name": "e"}))
    result = transform_batch(integration("events", payload={"identifier": "phone"}), rows, 0)
    assert result.items == []
    assert "phone cannot identify events" in result.rejects[0].reason
    assert result.rejects[1].reason == "PHONE is missing (NULL)"


def test_a_string_cursor_used_as_time_is_validated() -> None:
    rows = batch(UPDATED_AT=["2024-01-02T03:04:05Z", "yesterday"], EXTERNAL_ID=["u1", "u2"],
                 PAYLOAD=payloads({"name": "e"}, {"name": "e"}))
    result = transform_batch(integration("events"), rows, 0)
    assert objects(result)[0]["time"] == "2024-01-02T03:04:05Z"
    (reject,) = result.rejects
    assert reject.reason == "UPDATED_AT (the default of PAYLOAD.time) is not ISO 8601 or " \
        "yyyy-MM-dd'T'HH:mm:ss:SSSZ"


def test_alias_events_carry_update_existing_only_false() -> None:
    rows = batch(UPDATED_AT=times(1), ALIAS_NAME=["n"], ALIAS_LABEL=["l"],
                 PAYLOAD=payloads({"name": "e"}))
    (obj,) = objects(transform_batch(integration("events", payload={"identifier": "user_alias"}),
                                     rows, 0))
    assert obj["_update_existing_only"] is False


def test_mapped_events_with_fixed_name_and_property_columns() -> None:
    mapping = {
        "identifier": {"platform_id": "PID"},
        "event": {"name": "signed_up", "time": "AT", "properties": {"PLAN": "plan", "N": "n"}},
    }
    at = pa.array([datetime(2024, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2))), None],
                  pa.timestamp("us", tz="Europe/Berlin"))
    rows = batch(UPDATED_AT=times(2), PID=["p1", "p2"], AT=at, PLAN=["pro", None],
                 N=pa.array([None, None], pa.int64()))
    result = transform_batch(integration("events", mapping=mapping), rows, 0)
    assert objects(result) == [
        {"platform_id": "p1", "name": "signed_up", "time": "2024-02-03T02:05:06Z",
         "properties": {"plan": "pro"}},
        {"platform_id": "p2", "name": "signed_up", "time": "2024-01-02T03:04:06Z"},
    ]


def test_mapped_events_with_a_name_column() -> None:
    mapping = {"identifier": {"email": "MAIL"},
               "event": {"name_column": "EV", "app_id": "APP"}}
    rows = batch(UPDATED_AT=times(2), MAIL=["a@x.io", "b@x.io"], EV=["opened", None],
                 APP=["app", None])
    result = transform_batch(integration("events", mapping=mapping), rows, 0)
    assert objects(result) == [{"email": "a@x.io", "app_id": "app", "name": "opened",
                                "time": T0_ISO}]
    (reject,) = result.rejects
    assert (reject.seq, reject.key, reject.reason) == (1, "b@x.io", "name (column EV) is missing")


# --- purchases -------------------------------------------------------------------------------


def test_payload_purchases_default_quantity_and_time() -> None:
    rows = batch(
        UPDATED_AT=times(2),
        EXTERNAL_ID=["u1", "u2"],
        PAYLOAD=payloads(
            {"product_id": "sku", "currency": "USD", "price": 9.99},
            {"product_id": "sku", "currency": "EUR", "price": 5, "quantity": 3,
             "time": "2024-01-01T00:00:00Z", "properties": {"size": "L"}},
        ),
    )
    result = transform_batch(integration("purchases"), rows, 0)
    assert objects(result) == [
        {"external_id": "u1", "product_id": "sku", "currency": "USD", "price": 9.99,
         "quantity": 1, "time": T0_ISO},
        {"external_id": "u2", "product_id": "sku", "currency": "EUR", "price": 5, "quantity": 3,
         "time": "2024-01-01T00:00:00Z", "properties": {"size": "L"}},
    ]
    assert {i.array for i in result.items} == {"purchases"}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"currency": "USD", "price": 1}, "PAYLOAD.product_id is missing"),
        ({"product_id": "p", "currency": "dollars", "price": 1}, "PAYLOAD.currency is not"),
        ({"product_id": "p", "currency": "USD", "price": "1.00"}, "PAYLOAD.price must be a"),
        ({"product_id": "p", "currency": "USD"}, "PAYLOAD.price is missing"),
        ({"product_id": "p", "currency": "USD", "price": 1, "quantity": 101},
         "PAYLOAD.quantity must be from 1 to 100"),
        ({"product_id": "p", "currency": "USD", "price": 1, "quantity": 0.5},
         "PAYLOAD.quantity must be an integer"),
        ({"product_id": "p", "currency": "USD", "price": 1, "name": "x"},
         "PAYLOAD key 'name' is not a field of a purchase"),
    ],
)
def test_bad_purchases_are_rejected(payload: dict[str, Any], reason: str) -> None:
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=["u1"], PAYLOAD=payloads(payload))
    (reject,) = transform_batch(integration("purchases"), rows, 0).rejects
    assert reason in reject.reason


def test_mapped_purchases_with_decimal_price_and_quantity() -> None:
    mapping = {
        "identifier": {"alias_name": "AN", "alias_label": "AL"},
        "purchase": {"product_id": "SKU", "currency": "CUR", "price": "PRICE", "quantity": "QTY",
                     "properties": {"COLOR": "color"}},
    }
    rows = batch(
        UPDATED_AT=times(2), AN=["n1", "n2"], AL=["crm", "crm"], SKU=["s", "s"],
        CUR=["USD", "USD"], PRICE=pa.array([Decimal("19.90"), Decimal("1")], pa.decimal128(8, 2)),
        QTY=pa.array([2, None], pa.int32()), COLOR=["red", None],
    )
    result = transform_batch(integration("purchases", mapping=mapping), rows, 0)
    assert objects(result) == [
        {"user_alias": {"alias_name": "n1", "alias_label": "crm"}, "product_id": "s",
         "currency": "USD", "price": 19.9, "quantity": 2, "time": T0_ISO,
         "properties": {"color": "red"}, "_update_existing_only": False},
        {"user_alias": {"alias_name": "n2", "alias_label": "crm"}, "product_id": "s",
         "currency": "USD", "price": 1.0, "quantity": 1, "time": "2024-01-02T03:04:06Z",
         "_update_existing_only": False},
    ]


# --- row accounting and keys -----------------------------------------------------------------


def test_every_row_is_one_item_or_one_reject() -> None:
    rows = batch(
        UPDATED_AT=times(6),
        EXTERNAL_ID=pa.array(["u1", None, "u3", "u4", "", "u6"], pa.string()),
        PAYLOAD=pa.array(["{}", "{}", "oops", '{"a": 1}', "{}", '{"$b": 2}']),
    )
    result = transform_batch(integration(), rows, 100)
    assert len(result.items) + len(result.rejects) == 6
    assert_accounted(result, 6, 100)
    assert [i.seq for i in result.items] == [100, 103]
    assert [(r.seq, r.key) for r in result.rejects] == [(101, ""), (102, "u3"), (104, ""),
                                                        (105, "u6")]


def sha1_part(text: str) -> str:
    return "sha1:" + hashlib.sha1(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("kind", ["events", "purchases"])
@pytest.mark.parametrize("row_key", [None, ["EXTERNAL_ID", "PAYLOAD"]])
def test_payload_key_part_is_a_digest_however_short(kind: str, row_key: list[str] | None
                                                    ) -> None:
    """The PAYLOAD column in a row key (by default, or named in `row_key` in any case) holds
    payload values: rejects and items carry its digest, never its text, however short."""
    short = ['{"email": "a@b.io"}', '{"phone": "+15551234"}', "{bad", None]
    rows = batch(UPDATED_AT=times(4), EXTERNAL_ID=["u1", "u2", "u3", "u4"], PAYLOAD=short)
    config = integration(kind, **({"row_key": row_key} if row_key else {}))
    result = transform_batch(config, rows, 0)
    keys = sorted([r.key for r in result.rejects] + [i.key for i in result.items])
    assert keys == sorted([f"u{n + 1}|{sha1_part(p)}" for n, p in enumerate(short[:3])]
                          + ["u4|"])
    assert not any(secret in k for secret in ("a@b.io", "+15551234", "{") for k in keys)


def test_declared_key_columns_stay_readable() -> None:
    """Identifier and declared key columns of 64 characters or fewer are shown as they are."""
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=["u1"], EVENT_ID=["e-1"],
                 PAYLOAD=payloads({"name": "n"}))
    (item,) = transform_batch(integration("events", row_key=["EXTERNAL_ID", "EVENT_ID"]),
                              rows, 0).items
    assert item.key == "u1|e-1"


def test_row_key_columns_join_and_hash() -> None:
    long_value = "k" * 65
    rows = batch(UPDATED_AT=times(1), EXTERNAL_ID=["u1"], ID2=[long_value],
                 PAYLOAD=payloads({"a": 1}))
    config = integration(row_key=["EXTERNAL_ID", "UPDATED_AT", "ID2"])
    (item,) = transform_batch(config, rows, 0).items
    digest = hashlib.sha1(long_value.encode()).hexdigest()[:16]
    assert item.key == f"u1|2024-01-02T03:04:05|sha1:{digest}"


@pytest.mark.parametrize(
    ("values", "key"),
    [
        (["a", 1, None], "a|1|"),
        ([datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)], "2024-01-02T03:04:05+00:00"),
        ([date(2024, 1, 2)], "2024-01-02"),
        (["x" * 64], "x" * 64),
        (["x" * 65], "sha1:" + hashlib.sha1(b"x" * 65).hexdigest()[:16]),
        ([], ""),
    ],
)
def test_render_key(values: list[Any], key: str) -> None:
    assert render_key(values) == key


def test_render_key_hides_the_positions_given() -> None:
    assert render_key(["u1", "x", None], hidden={1, 2}) == f"u1|{sha1_part('x')}|"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2024, 1, 2, 3, 4, 5), "2024-01-02T03:04:05Z"),
        (datetime(2024, 1, 2, 3, 4, 5, 123000), "2024-01-02T03:04:05.123Z"),
        (datetime(2024, 1, 2, 3, 4, 5, 123456), "2024-01-02T03:04:05.123456Z"),
        (datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))),
         "2024-01-02T03:04:05Z"),
    ],
)
def test_iso_utc(value: datetime, text: str) -> None:
    assert iso_utc(value) == text


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamp_columns_render_like_iso_utc(unit: str) -> None:
    values = [datetime(2024, 1, 2, 3, 4, 5), datetime(2024, 1, 2, 3, 4, 5, 250000),
              datetime(1969, 12, 31, 23, 59, 59, 999000)]
    mapping = {"identifier": {"external_id": "U"}, "attributes": {"T": "t"}}
    rows = batch(UPDATED_AT=times(3), U=["a", "b", "c"], T=pa.array(values, pa.timestamp(unit)))
    got = [o["t"] for o in objects(transform_batch(integration(mapping=mapping), rows, 0))]
    expected = [iso_utc(x.replace(microsecond=0) if unit == "s" else x) for x in values]
    assert got == expected


@pytest.mark.parametrize(("kind", "extra", "hidden"), [
    ("events", {}, {"PAYLOAD"}),
    ("events", {"row_key": ["EXTERNAL_ID", "payload"]}, {"payload"}),
    ("events", {"row_key": ["EVENT_ID"]}, set()),
    ("attributes", {}, set()),
    ("purchases", {"payload": {"identifier": "email", "payload_column": "DATA"}}, {"DATA"}),
])
def test_hidden_key_columns(kind: str, extra: dict[str, Any], hidden: set[str]) -> None:
    """Only the payload column is hidden, matched case-insensitively as columns are."""
    assert integration(kind, **extra).hidden_key_columns == hidden


def test_names_found_good_earlier_in_a_batch_do_not_excuse_a_later_row() -> None:
    """Rows of a batch skip the per-name check for names already found good: a later row that
    adds a bad name, or gives a seen name a value with a rule, is still rejected."""
    rows = batch(UPDATED_AT=times(5), EXTERNAL_ID=["u1", "u2", "u3", "u4", "u5"],
                 PAYLOAD=payloads({"plan": "a", "email_subscribe": "opted_in"},
                                  {"plan": "b", "$bad": 1},
                                  {"plan": {"add": 5}},
                                  {"plan": "c", "email_subscribe": "yes"},
                                  {"plan": "d", "external_id": "other"}))
    result = transform_batch(integration(), rows, 0)
    assert [i.seq for i in result.items] == [0]
    assert [r.seq for r in result.rejects] == [1, 2, 3, 4]
    assert "'$bad'" in result.rejects[0].reason and "'plan'" in result.rejects[1].reason
    assert "email_subscribe" in result.rejects[2].reason
    assert "reserved" in result.rejects[3].reason
