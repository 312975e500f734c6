"""Hypothesis properties of POST /users/track against the running sandbox."""

from __future__ import annotations

from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engage_sandbox.web.server import SandboxHandle

IDS = st.text(alphabet="abcdefghijkmnpqrstuvwxyz", min_size=3, max_size=8).map(lambda s: "id-" + s)
TIMES = st.sampled_from(["2024-05-01T12:00:00Z", "2024-05-01T12:00:00+02:00",
                         "2013-02-04T10:12:34:000+0000", "2024-05-01"])
SIMPLE = st.one_of(st.integers(-10**6, 10**6), st.booleans(),
                   st.text(max_size=20).filter(lambda s: len(s) < 10 or not s[:4].isdigit()),
                   st.floats(allow_nan=False, allow_infinity=False, width=32))
PROP_NAMES = st.text(min_size=1, max_size=12).filter(lambda s: not s.startswith("$"))
PROPS = st.dictionaries(PROP_NAMES, SIMPLE, max_size=4)
ATTR_NAMES = st.text(alphabet="abcdefgh_", min_size=1, max_size=8).filter(
    lambda s: s not in {"email", "phone", "email_subscribe"})

ATTRIBUTE = st.builds(lambda i, a: {"external_id": i, **a}, IDS,
                      st.dictionaries(ATTR_NAMES, SIMPLE, min_size=1, max_size=3))
EVENT = st.builds(lambda i, n, t, p: {"external_id": i, "name": n, "time": t, "properties": p},
                  IDS, st.text(min_size=1, max_size=10), TIMES, PROPS)
PURCHASE = st.builds(
    lambda i, q, t: {"external_id": i, "product_id": "sku", "currency": "EUR", "price": 1.5,
                     "quantity": q, "time": t},
    IDS, st.integers(1, 100), TIMES)

# Invalid items: each breaks exactly one rule.
BAD_EVENT = st.sampled_from([
    {"name": "x", "time": "2024-05-01T12:00:00Z"},
    {"external_id": "undefined", "name": "x", "time": "2024-05-01T12:00:00Z"},
    {"external_id": "ok", "name": "x", "time": "not a time"},
    {"external_id": "ok", "name": "x", "time": "2024-05-01T12:00:00Z", "properties": {"$p": 1}},
])
BAD_PURCHASE = st.sampled_from([
    {"external_id": "ok", "product_id": "p", "currency": "EUR", "price": 1, "quantity": 0,
     "time": "2024-05-01T12:00:00Z"},
    {"external_id": "ok", "product_id": "p", "currency": "EUR", "time": "2024-05-01T12:00:00Z"},
])
BAD_ATTRIBUTE = st.sampled_from([{"a": 1}, {"phone": "12345", "a": 1}, 7])

PROFILE = settings(max_examples=25, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])


def _post(sandbox: SandboxHandle, body: dict[str, Any]) -> httpx.Response:
    httpx.post(f"{sandbox.control_url}/reset").raise_for_status()
    return httpx.post(f"{sandbox.base_url}/users/track", json=body,
                      headers={"Authorization": f"Bearer {sandbox.api_key}"})


@PROFILE
@given(attributes=st.lists(ATTRIBUTE, max_size=25), events=st.lists(EVENT, max_size=25),
       purchases=st.lists(PURCHASE, max_size=25))
def test_valid_payloads_are_accepted_and_counted(
    sandbox: SandboxHandle, attributes: list[Any], events: list[Any], purchases: list[Any]
) -> None:
    body = {"attributes": attributes, "events": events, "purchases": purchases}
    response = _post(sandbox, body)
    if not attributes and not events and not purchases:
        assert response.status_code == 400
        return
    assert response.status_code == 201
    assert response.json() == {"message": "success", "attributes_processed": len(attributes),
                               "events_processed": len(events),
                               "purchases_processed": len(purchases)}
    counters = httpx.get(f"{sandbox.control_url}/counters").json()
    assert counters["events"] == len(events)
    assert counters["purchases"] == len(purchases)
    assert counters["attributes_processed"] == len(attributes)
    assert counters["data_points"] == (
        sum(len(a) - 1 for a in attributes) + len(events) + len(purchases))
    by_key = counters["data_points_by_key"]
    assert sum(n for keys in by_key.values() for n in keys.values()) == counters["data_points"]
    for name in {k for a in attributes for k in a} - {"external_id"}:
        assert by_key["attributes"][name] == sum(name in a for a in attributes)
    by_user: dict[str, dict[str, int]] = {}
    for event in events:
        names = by_user.setdefault(event["external_id"], {})
        names[event["name"]] = names.get(event["name"], 0) + 1
    assert counters["events_by_user"] == by_user


def _mix(draw: st.DrawFn, good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]
         ) -> tuple[list[Any], list[int]]:
    flags = draw(st.lists(st.booleans(), max_size=20))
    items = [draw(bad) if is_bad else draw(good) for is_bad in flags]
    return items, [i for i, is_bad in enumerate(flags) if is_bad]


@st.composite
def mixed_payloads(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, list[int]]]:
    body: dict[str, Any] = {}
    bad: dict[str, list[int]] = {}
    for name, good, wrong in (("attributes", ATTRIBUTE, BAD_ATTRIBUTE),
                              ("events", EVENT, BAD_EVENT),
                              ("purchases", PURCHASE, BAD_PURCHASE)):
        body[name], bad[name] = _mix(draw, good, wrong)
    return body, bad


@PROFILE
@given(case=mixed_payloads())
def test_invalid_items_are_reported_at_their_index(
    sandbox: SandboxHandle, case: tuple[dict[str, Any], dict[str, list[int]]]
) -> None:
    body, bad = case
    response = _post(sandbox, body)
    reported = {(e["input_array"], e["index"]) for e in response.json().get("errors", [])}
    assert reported == {(name, i) for name, indexes in bad.items() for i in indexes}
    valid = {name: len(items) - len(bad[name]) for name, items in body.items()}
    if not any(valid.values()):
        assert response.status_code == 400
        return
    assert response.status_code == 201
    assert all(response.json()[f"{name}_processed"] == n for name, n in valid.items())
    profiles = httpx.get(f"{sandbox.control_url}/profiles").json()["profiles"]
    assert sum(len(p["events"]) for p in profiles) == valid["events"]
    assert sum(len(p["purchases"]) for p in profiles) == valid["purchases"]
    stored_ids = {p["external_id"] for p in profiles}
    assert {a["external_id"] for i, a in enumerate(body["attributes"])
            if i not in bad["attributes"]} <= stored_ids
