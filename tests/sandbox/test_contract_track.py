"""Contract of POST /users/track over real HTTP, table-driven from the spec and the facts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.sandbox.conftest import profile

T = "2024-05-01T12:00:00Z"
REQUIRED = "'external_id', 'braze_id', 'user_alias', 'email' or 'phone' is required"
NO_VALID = "Valid data must be provided in the 'attributes', 'events', or 'purchases' fields."


def ev(ref: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {**(ref or {"external_id": "u1"}), "name": "played", "time": T, **fields}


def pu(ref: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    base = {"product_id": "sku-1", "currency": "USD", "price": 9.99, "time": T}
    return {**(ref or {"external_id": "u1"}), **base, **fields}


def err(type_: str, array: str, index: int) -> dict[str, Any]:
    return {"type": type_, "input_array": array, "index": index}


ACCEPTED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "one of each",
        {"attributes": [{"external_id": "u1", "a": 1}], "events": [ev()], "purchases": [pu()]},
        {"message": "success", "attributes_processed": 1, "events_processed": 1,
         "purchases_processed": 1},
    ),
    ("events only", {"events": [ev(), ev()]}, {"message": "success", "events_processed": 2}),
    (
        "empty array still reported",
        {"attributes": [], "events": [ev()]},
        {"message": "success", "attributes_processed": 0, "events_processed": 1},
    ),
    (
        "colon-millis time format",
        {"events": [ev(time="2013-02-04T10:12:34:000+0000")]},
        {"message": "success", "events_processed": 1},
    ),
    (
        "every custom attribute type",
        {"attributes": [{"external_id": "u1", "s": "x", "b": True, "i": 3, "f": 1.5,
                         "arr": ["a", "b"], "gone": None}]},
        {"message": "success", "attributes_processed": 1},
    ),
    (
        "75 objects in total",
        {"attributes": [{"external_id": f"u{i}", "a": i} for i in range(25)],
         "events": [ev() for _ in range(25)], "purchases": [pu() for _ in range(25)]},
        {"message": "success", "attributes_processed": 25, "events_processed": 25,
         "purchases_processed": 25},
    ),
    (
        "properties of every allowed type",
        {"events": [ev(properties={"n": 1, "f": 2.5, "b": False, "d": T, "s": "x" * 255,
                                   "arr": [1, "a"], "obj": {"k": "v"}})]},
        {"message": "success", "events_processed": 1},
    ),
    (
        "purchase with quantity",
        {"purchases": [pu(quantity=3)]},
        {"message": "success", "purchases_processed": 1},
    ),
]


@pytest.mark.parametrize(("payload", "expected"), [c[1:] for c in ACCEPTED],
                         ids=[c[0] for c in ACCEPTED])
def test_accepted(client: httpx.Client, payload: dict[str, Any], expected: dict[str, Any]) -> None:
    response = client.post("/users/track", json=payload)
    assert response.status_code == 201
    assert response.json() == expected


ITEM_ERRORS: list[tuple[str, str, dict[str, Any], str]] = [
    ("no reference", "events", {"name": "x", "time": T}, REQUIRED),
    ("invalid phone is no reference", "attributes", {"phone": "555-1234", "a": 1}, REQUIRED),
    ("blacklisted id", "events", ev({"external_id": "undefined"}),
     "provided external_id is blacklisted and disallowed"),
    ("blacklisted id any case", "attributes", {"external_id": "NULL", "a": 1},
     "provided external_id is blacklisted and disallowed"),
    ("two references", "events", ev({"external_id": "u1", "platform_id": "p"}),
     "only one of 'external_id', 'braze_id' or 'user_alias' may be given"),
    ("bad alias", "events", ev({"user_alias": {"alias_name": "a"}}), "'user_alias' is not valid"),
    ("bad email", "attributes", {"email": "not-an-email"}, "'email' is not valid"),
    ("flag not boolean", "events", ev(_update_existing_only="yes"),
     "'_update_existing_only' must be a boolean"),
    ("not an object", "events", "hello", "item must be an object"),
    ("missing name", "events", {"external_id": "u1", "time": T}, "'name' is required"),
    ("missing time", "events", {"external_id": "u1", "name": "x"}, "'time' is required"),
    ("bad time", "events", ev(time="yesterday"), "'time' is not valid"),
    ("long property name", "events", ev(properties={"p" * 256: 1}),
     "property names must be non-empty strings of at most 255 characters"),
    ("empty property name", "events", ev(properties={"": 1}),
     "property names must be non-empty strings of at most 255 characters"),
    ("dollar property name", "events", ev(properties={"$x": 1}),
     "property names must not start with '$'"),
    ("long string value", "events", ev(properties={"s": "x" * 256}),
     "string property values must be at most 255 characters"),
    ("date inside array", "events", ev(properties={"a": ["x", T]}),
     "dates are not allowed inside property arrays"),
    ("null property value", "events", ev(properties={"a": None}),
     "property values must be numbers, booleans, dates, strings, arrays or objects"),
    ("properties not an object", "events", ev(properties=[1]), "'properties' must be an object"),
    ("properties over 100 KB with arrays", "events",
     ev(properties={f"k{i}": ["x" * 200] * 10 for i in range(60)}),
     "properties with array or object values must be at most 100 KB"),
    ("quantity zero", "purchases", pu(quantity=0), "'quantity' is not valid"),
    ("quantity over 100", "purchases", pu(quantity=101), "'quantity' is not valid"),
    ("quantity not integer", "purchases", pu(quantity=1.5), "'quantity' is not valid"),
    ("missing product", "purchases", pu(product_id=None), "'product_id' is required"),
    ("bad currency", "purchases", pu(currency="dollars"), "'currency' is not valid"),
    ("missing price", "purchases", pu(price=None), "'price' is required"),
    ("price not number", "purchases", pu(price="9"), "'price' is not valid"),
    ("bad email_subscribe", "attributes", {"external_id": "u1", "email_subscribe": "maybe"},
     "'email_subscribe' is not valid"),
    ("bad subscription group", "attributes",
     {"external_id": "u1", "subscription_groups": [{"subscription_group_id": "g"}]},
     "'subscription_groups' is not valid"),
    ("add of a number", "attributes", {"external_id": "u1", "tags": {"add": 5}},
     "'tags' is not valid"),
    ("add of a string", "attributes", {"external_id": "u1", "tags": {"add": "abc"}},
     "'tags' is not valid"),
    ("remove of a number", "attributes", {"external_id": "u1", "tags": {"remove": 5}},
     "'tags' is not valid"),
    ("add of numbers", "attributes", {"external_id": "u1", "tags": {"add": [1, 2]}},
     "'tags' is not valid"),
    ("add of nested arrays", "attributes", {"external_id": "u1", "tags": {"add": [["a"]]}},
     "'tags' is not valid"),
    ("update of strings", "attributes", {"external_id": "u1", "pets": {"update": ["a"]}},
     "'pets' is not valid"),
    ("update of an object", "attributes", {"external_id": "u1", "pets": {"update": {"id": 1}}},
     "'pets' is not valid"),
]


@pytest.mark.parametrize(("array", "bad", "type_"), [c[1:] for c in ITEM_ERRORS],
                         ids=[c[0] for c in ITEM_ERRORS])
def test_item_error_among_valid(
    client: httpx.Client, control: httpx.Client, array: str, bad: Any, type_: str
) -> None:
    """The bad item is reported at its index; the valid rest is processed (201)."""
    valid = {"attributes": {"external_id": "ok", "a": 1}, "events": ev({"external_id": "ok"}),
             "purchases": pu({"external_id": "ok"})}[array]
    response = client.post("/users/track", json={array: [valid, bad, valid]})
    assert response.status_code == 201
    assert response.json() == {
        "message": "success", f"{array}_processed": 2, "errors": [err(type_, array, 1)]
    }
    stored = profile(control, external_id="ok")
    assert stored is not None
    if array != "attributes":
        assert len(stored[array]) == 2


def test_every_item_invalid_is_400_with_every_error(client: httpx.Client) -> None:
    payload = {"attributes": [{"a": 1}], "events": [{"name": "x", "time": T}, ev(time="x")],
               "purchases": [pu(quantity=-1)]}
    response = client.post("/users/track", json=payload)
    assert response.status_code == 400
    assert response.json() == {
        "message": NO_VALID,
        "errors": [err(REQUIRED, "attributes", 0), err(REQUIRED, "events", 0),
                   err("'time' is not valid", "events", 1),
                   err("'quantity' is not valid", "purchases", 0)],
    }


@pytest.mark.parametrize("payload", [{}, {"events": []}, {"attributes": None}, [1, 2]],
                         ids=["empty object", "empty array", "null array", "not an object"])
def test_no_data_is_400(client: httpx.Client, payload: Any) -> None:
    response = client.post("/users/track", json=payload)
    assert response.status_code == 400
    assert response.json() == {"message": NO_VALID, "errors": []}


def test_array_not_a_list_is_fatal(client: httpx.Client) -> None:
    response = client.post("/users/track", json={"events": {"name": "x"}})
    assert response.status_code == 400
    assert response.json() == {"message": "'events' must be an array",
                               "errors": ["'events' must be an array"]}


def test_over_75_objects_in_total(client: httpx.Client) -> None:
    payload = {"events": [ev() for _ in range(40)], "purchases": [pu() for _ in range(36)]}
    response = client.post("/users/track", json=payload)
    assert response.status_code == 400
    assert response.json() == {"message": "Max Input Length Exceeded",
                               "errors": ["Max Input Length Exceeded"]}


def test_email_only_profile_without_alias(client: httpx.Client, control: httpx.Client) -> None:
    client.post("/users/track", json={"attributes": [{"email": "a@x.io", "c": 1}]})
    stored = profile(control, email="a@x.io")
    assert stored is not None
    assert stored["external_id"] is None and stored["user_aliases"] == []
    assert stored["attributes"] == {"email": "a@x.io", "c": 1}


def test_shared_email_updates_most_recently_updated(
    client: httpx.Client, control: httpx.Client
) -> None:
    client.post("/users/track", json={"attributes": [
        {"external_id": "old", "email": "s@x.io"}, {"external_id": "new", "email": "s@x.io"}]})
    client.post("/users/track", json={"attributes": [{"email": "s@x.io", "tier": "gold"}]})
    new, old = profile(control, external_id="new"), profile(control, external_id="old")
    assert new is not None and old is not None
    assert new["attributes"].get("tier") == "gold" and "tier" not in old["attributes"]


def test_email_wins_over_phone(client: httpx.Client, control: httpx.Client) -> None:
    client.post("/users/track", json={"attributes": [
        {"email": "e@x.io", "phone": "+14155550100", "a": 1}]})
    stored = profile(control, email="e@x.io")
    assert stored is not None and stored["phone"] == "+14155550100"
    assert profile(control, phone="+14155550100") == stored


def test_valid_phone_is_a_reference(client: httpx.Client, control: httpx.Client) -> None:
    response = client.post("/users/track", json={"attributes": [{"phone": "+447700900123"}]})
    assert response.status_code == 201
    assert profile(control, phone="+447700900123") is not None


@pytest.mark.parametrize(
    ("item", "created"),
    [
        ({"external_id": "n1"}, True),
        ({"external_id": "n1", "_update_existing_only": False}, True),
        ({"external_id": "n1", "_update_existing_only": True}, False),
        ({"user_alias": {"alias_name": "n1", "alias_label": "crm"}}, False),
        ({"user_alias": {"alias_name": "n1", "alias_label": "crm"}, "_update_existing_only": True},
         False),
        ({"user_alias": {"alias_name": "n1", "alias_label": "crm"},
          "_update_existing_only": False}, True),
        ({"platform_id": "nope"}, False),
    ],
    ids=["id default", "id false", "id true", "alias omitted", "alias true", "alias false",
         "platform_id"],
)
@pytest.mark.parametrize("array", ["attributes", "events"])
def test_update_existing_only(
    client: httpx.Client, control: httpx.Client, item: dict[str, Any], created: bool, array: str
) -> None:
    body = {**item, "a": 1} if array == "attributes" else {**item, "name": "x", "time": T}
    response = client.post("/users/track", json={array: [body]})
    assert response.status_code == 201
    assert response.json()[f"{array}_processed"] == 1
    stored = control.get("/profiles").json()["profiles"]
    assert len(stored) == (1 if created else 0)
    if created and "user_alias" in item:
        assert stored[0]["external_id"] is None
        assert stored[0]["user_aliases"] == [{"alias_label": "crm", "alias_name": "n1"}]


def test_existing_alias_is_updated_without_flag(
    client: httpx.Client, control: httpx.Client
) -> None:
    alias = {"alias_name": "a1", "alias_label": "crm"}
    client.post("/users/track",
                json={"attributes": [{"user_alias": alias, "_update_existing_only": False}]})
    client.post("/users/track", json={"events": [{"user_alias": alias, "name": "x", "time": T}]})
    stored = profile(control, alias_name="a1", alias_label="crm")
    assert stored is not None and [e["name"] for e in stored["events"]] == ["x"]


def test_subscription_groups_propagate_to_shared_email(
    client: httpx.Client, control: httpx.Client
) -> None:
    client.post("/users/track", json={"attributes": [
        {"external_id": "a", "email": "fam@x.io"}, {"external_id": "b", "email": "fam@x.io"},
        {"external_id": "c", "email": "other@x.io"}]})
    groups = [{"subscription_group_id": "g1", "subscription_state": "subscribed"}]
    client.post("/users/track",
                json={"attributes": [{"external_id": "a", "subscription_groups": groups}]})
    states = {p["external_id"]: p["subscription_groups"]
              for p in control.get("/profiles").json()["profiles"]}
    assert states == {"a": {"g1": "subscribed"}, "b": {"g1": "subscribed"}, "c": {}}


def test_attribute_values_and_unset(client: httpx.Client, control: httpx.Client) -> None:
    client.post("/users/track", json={"attributes": [
        {"external_id": "u", "s": "x", "b": True, "i": 2, "f": 0.5, "arr": ["a"], "drop": 1}]})
    client.post("/users/track", json={"attributes": [
        {"external_id": "u", "drop": None, "arr": {"add": ["b"], "remove": ["a"]}}]})
    stored = profile(control, external_id="u")
    assert stored is not None
    assert stored["attributes"] == {"s": "x", "b": True, "i": 2, "f": 0.5, "arr": ["b"]}


def test_bad_array_operation_is_an_item_error_and_nothing_half_applied(
    client: httpx.Client, control: httpx.Client
) -> None:
    """An array operator holding a non-array is an item error for that object
    alone (201), never a 500 after the earlier objects were applied, and never stored as the
    characters of a string."""
    good = [{"external_id": f"g{i}", "tags": {"add": ["x"]}} for i in range(3)]
    bad = [{"external_id": "b1", "tags": {"add": "abc"}},
           {"external_id": "b2", "tags": {"add": 5}}]
    response = client.post("/users/track", json={"attributes": [*good[:2], *bad, good[2]]})
    assert response.status_code == 201
    assert response.json() == {"message": "success", "attributes_processed": 3,
                               "errors": [err("'tags' is not valid", "attributes", 2),
                                          err("'tags' is not valid", "attributes", 3)]}
    assert [profile(control, external_id=f"g{i}")["attributes"]["tags"]  # type: ignore[index]
            for i in range(3)] == [["x"]] * 3
    assert profile(control, external_id="b1") is None
    assert profile(control, external_id="b2") is None


def test_array_operations_of_the_right_shape_apply(
    client: httpx.Client, control: httpx.Client
) -> None:
    client.post("/users/track", json={"attributes": [
        {"external_id": "u", "tags": ["a", "b"], "pets": [{"id": 1}]}]})
    response = client.post("/users/track", json={"attributes": [
        {"external_id": "u", "tags": {"add": ["c"], "remove": ["a"]},
         "pets": {"update": [{"id": 2}]}}]})
    assert response.json() == {"message": "success", "attributes_processed": 1}
    stored = profile(control, external_id="u")
    assert stored is not None
    assert stored["attributes"] == {"tags": ["b", "c"], "pets": [{"id": 1}, {"id": 2}]}


def test_processing_order_attributes_then_events_then_purchases(
    client: httpx.Client, control: httpx.Client
) -> None:
    """An event for an update-only id succeeds when the same request's attributes create it."""
    payload = {
        "purchases": [pu({"external_id": "late"}, _update_existing_only=True)],
        "events": [ev({"external_id": "late"}, _update_existing_only=True)],
        "attributes": [{"external_id": "late", "a": 1}],
    }
    assert client.post("/users/track", json=payload).status_code == 201
    stored = profile(control, external_id="late")
    assert stored is not None
    assert len(stored["events"]) == 1 and len(stored["purchases"]) == 1


def test_events_are_never_deduplicated(client: httpx.Client, control: httpx.Client) -> None:
    client.post("/users/track", json={"events": [ev(), ev()]})
    client.post("/users/track", json={"events": [ev()]})
    counters = control.get("/counters").json()
    assert counters["events"] == 3
    assert counters["events_by_user"] == {"u1": {"played": 3}}
