"""Contract of /subscription/status/set and /v2/subscription/status/set over real HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

SUCCESS = {"message": "success"}
IDS50 = [f"u{i}" for i in range(50)]


def seed_users(client: httpx.Client) -> None:
    client.post("/users/track", json={"attributes": [
        {"external_id": "a", "email": "fam@x.io"},
        {"external_id": "b", "email": "fam@x.io"},
        {"external_id": "c", "phone": "+14155550100"},
        {"external_id": "d"},
    ]})


def groups(control: httpx.Client) -> dict[str, dict[str, str]]:
    return {p["external_id"]: p["subscription_groups"]
            for p in control.get("/profiles").json()["profiles"]}


V1 = "/subscription/status/set"
V2 = "/v2/subscription/status/set"
BASE = {"subscription_group_id": "g1", "subscription_state": "subscribed"}

V1_ACCEPTED: list[tuple[str, dict[str, Any], set[str]]] = [
    ("external ids", {**BASE, "external_id": ["d"]}, {"d"}),
    ("external id shares email", {**BASE, "external_id": ["a"]}, {"a", "b"}),
    ("email string", {**BASE, "email": "fam@x.io"}, {"a", "b"}),
    ("email list", {**BASE, "email": ["fam@x.io"]}, {"a", "b"}),
    ("phones", {**BASE, "phone": ["+14155550100"]}, {"c"}),
    ("ids with phones", {**BASE, "external_id": ["d"], "phone": ["+14155550100"]}, {"c", "d"}),
    ("50 ids", {**BASE, "external_id": IDS50}, set()),
    ("unknown id skipped", {**BASE, "external_id": ["zz"]}, set()),
]


@pytest.mark.parametrize(("body", "changed"), [c[1:] for c in V1_ACCEPTED],
                         ids=[c[0] for c in V1_ACCEPTED])
def test_v1_accepted(
    client: httpx.Client, control: httpx.Client, body: dict[str, Any], changed: set[str]
) -> None:
    seed_users(client)
    response = client.post(V1, json=body)
    assert (response.status_code, response.json()) == (201, SUCCESS)
    assert {u for u, g in groups(control).items() if g.get("g1") == "subscribed"} == changed


def test_v2_accepted(client: httpx.Client, control: httpx.Client) -> None:
    seed_users(client)
    body = {"subscription_groups": [
        {**BASE, "emails": ["fam@x.io"]},
        {"subscription_group_id": "g2", "subscription_state": "unsubscribed",
         "external_ids": ["d"], "phones": ["+14155550100"]},
    ]}
    response = client.post(V2, json=body)
    assert (response.status_code, response.json()) == (201, SUCCESS)
    assert groups(control) == {"a": {"g1": "subscribed"}, "b": {"g1": "subscribed"},
                               "c": {"g2": "unsubscribed"}, "d": {"g2": "unsubscribed"}}


REJECTED_V1: list[tuple[str, dict[str, Any], str]] = [
    ("no group id", {"subscription_state": "subscribed", "external_id": ["a"]},
     "'subscription_group_id' is required"),
    ("bad state", {**BASE, "subscription_state": "maybe", "external_id": ["a"]},
     "'subscription_state' must be 'subscribed' or 'unsubscribed'"),
    ("no identifiers", BASE, "'external_id', 'email' or 'phone' is required"),
    ("emails and phones", {**BASE, "email": ["a@x.io"], "phone": ["+14155550100"]},
     "'email' and 'phone' cannot both be given in one object"),
    ("51 ids", {**BASE, "external_id": [*IDS50, "x"]},
     "'external_id' must be an array of 1 to 50 strings"),
    ("empty ids", {**BASE, "external_id": []},
     "'external_id' must be an array of 1 to 50 strings"),
    ("51 emails", {**BASE, "email": [f"e{i}@x.io" for i in range(51)]},
     "'email' must be a string or an array of 1 to 50 strings"),
    ("51 phones", {**BASE, "phone": [f"+1415555{i:04d}" for i in range(51)]},
     "'phone' must be an array of 1 to 50 strings"),
    ("phone not E.164", {**BASE, "phone": ["4155550100"]},
     "'phone' must hold phone numbers in E.164 format"),
    ("bad email", {**BASE, "email": "nope"}, "'email' must hold valid email addresses"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in REJECTED_V1],
                         ids=[c[0] for c in REJECTED_V1])
def test_v1_rejected(
    client: httpx.Client, control: httpx.Client, body: dict[str, Any], message: str
) -> None:
    seed_users(client)
    response = client.post(V1, json=body)
    assert (response.status_code, response.json()) == (400, {"message": message})
    assert all(g == {} for g in groups(control).values())


REJECTED_V2: list[tuple[str, Any, str]] = [
    ("missing list", {}, "'subscription_groups' must be a non-empty array of objects"),
    ("empty list", {"subscription_groups": []},
     "'subscription_groups' must be a non-empty array of objects"),
    ("emails and phones", {"subscription_groups": [
        {**BASE, "emails": ["a@x.io"], "phones": ["+14155550100"]}]},
     "'emails' and 'phones' cannot both be given in one object"),
    ("51 external ids", {"subscription_groups": [{**BASE, "external_ids": [*IDS50, "x"]}]},
     "'external_ids' must be an array of 1 to 50 strings"),
    ("no identifiers", {"subscription_groups": [BASE]},
     "'external_ids', 'emails' or 'phones' is required"),
    ("second object bad applies nothing", {"subscription_groups": [
        {**BASE, "external_ids": ["d"]}, {**BASE, "subscription_state": "x", "emails": "a@x.io"}]},
     "'subscription_state' must be 'subscribed' or 'unsubscribed'"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in REJECTED_V2],
                         ids=[c[0] for c in REJECTED_V2])
def test_v2_rejected(
    client: httpx.Client, control: httpx.Client, body: Any, message: str
) -> None:
    seed_users(client)
    response = client.post(V2, json=body)
    assert (response.status_code, response.json()) == (400, {"message": message})
    assert all(g == {} for g in groups(control).values())


def test_both_endpoints_share_one_rate_group(client: httpx.Client) -> None:
    first = client.post(V1, json={**BASE, "external_id": ["d"]})
    second = client.post(V2, json={"subscription_groups": [{**BASE, "external_ids": ["d"]}]})
    assert first.headers["x-ratelimit-limit"] == second.headers["x-ratelimit-limit"] == "5000"
    assert int(first.headers["x-ratelimit-remaining"]) - 1 == int(
        second.headers["x-ratelimit-remaining"])
