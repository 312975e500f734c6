"""Contract of /users/delete, /users/identify, /users/merge, /users/alias/update (and
/users/alias/new) over real HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.sandbox.conftest import profile

T1, T2 = "2024-01-01T00:00:00Z", "2024-06-01T00:00:00Z"
ALIAS = {"alias_name": "anon-1", "alias_label": "crm"}


def track(client: httpx.Client, **payload: Any) -> None:
    assert client.post("/users/track", json=payload).status_code == 201


def make_alias_only(client: httpx.Client, alias: dict[str, str] = ALIAS, **attrs: Any) -> None:
    track(client, attributes=[{"user_alias": alias, "_update_existing_only": False, **attrs}],
          events=[{"user_alias": alias, "name": "seen", "time": T1}])


# ---- merge -----------------------------------------------------------------------------------

MERGE_MESSAGES: list[tuple[str, Any, str]] = [
    ("not an array", {"merge_updates": {}}, "'merge_updates' must be an array of objects"),
    ("missing", {}, "'merge_updates' must be an array of objects"),
    ("array of strings", {"merge_updates": ["x"]}, "'merge_updates' must be an array of objects"),
    ("51 updates", {"merge_updates": [{"identifier_to_merge": {"external_id": "a"},
                                        "identifier_to_keep": {"external_id": "b"}}] * 51},
     "a single request may not contain more than 50 merge updates"),
    ("extra key", {"merge_updates": [{"identifier_to_merge": {"external_id": "a"},
                                       "identifier_to_keep": {"external_id": "b"}, "x": 1}]},
     "'merge_updates' must only have 'identifier_to_merge' and 'identifier_to_keep'"),
    ("missing key", {"merge_updates": [{"identifier_to_merge": {"external_id": "a"}}]},
     "'merge_updates' must only have 'identifier_to_merge' and 'identifier_to_keep'"),
    ("id not a string", {"merge_updates": [{"identifier_to_merge": {"external_id": 1},
                                             "identifier_to_keep": {"external_id": "b"}}]},
     "identifiers must be objects with an 'external_id' property that is a string, "
     "'user_alias' property that is an object, or 'email' property that is a string"),
    ("email without prioritization", {"merge_updates": [
        {"identifier_to_merge": {"email": "a@x.io"}, "identifier_to_keep": {"external_id": "b"}}]},
     "identifiers must be objects with an 'external_id' property that is a string, "
     "'user_alias' property that is an object, or 'email' property that is a string"),
    ("both identified and unidentified", {"merge_updates": [
        {"identifier_to_merge": {"email": "a@x.io",
                                 "prioritization": ["identified", "unidentified"]},
         "identifier_to_keep": {"external_id": "b"}}]},
     "identifiers must be objects with an 'external_id' property that is a string, "
     "'user_alias' property that is an object, or 'email' property that is a string"),
    ("two identifiers in one", {"merge_updates": [
        {"identifier_to_merge": {"external_id": "a", "user_alias": ALIAS},
         "identifier_to_keep": {"external_id": "b"}}]},
     "identifiers must be objects with an 'external_id' property that is a string, "
     "'user_alias' property that is an object, or 'email' property that is a string"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in MERGE_MESSAGES],
                         ids=[c[0] for c in MERGE_MESSAGES])
def test_merge_rejected(client: httpx.Client, body: Any, message: str) -> None:
    response = client.post("/users/merge", json=body)
    assert (response.status_code, response.json()) == (400, {"message": message})


def test_merge_field_rules(client: httpx.Client, control: httpx.Client) -> None:
    track(client,
          attributes=[{"external_id": "keep", "color": "blue"},
                      {"external_id": "gone", "color": "red", "size": "L", "email": "g@x.io"}],
          events=[{"external_id": "keep", "name": "e", "time": T2},
                  {"external_id": "gone", "name": "e", "time": T1},
                  {"external_id": "gone", "name": "e", "time": "2024-12-01T00:00:00Z"}],
          purchases=[{"external_id": "gone", "product_id": "p", "currency": "EUR", "price": 1,
                      "time": T1}])
    body = {"merge_updates": [{"identifier_to_merge": {"external_id": "gone"},
                               "identifier_to_keep": {"external_id": "keep"}}]}
    response = client.post("/users/merge", json=body)
    assert (response.status_code, response.json()) == (202, {"message": "success"})
    assert profile(control, external_id="gone") is None
    kept = profile(control, external_id="keep")
    assert kept is not None
    assert kept["attributes"] == {"color": "blue", "size": "L", "email": "g@x.io"}
    assert kept["event_summary"] == {"e": {"count": 3, "first": T1,
                                           "last": "2024-12-01T00:00:00Z"}}
    assert kept["purchase_summary"] == {"p": {"count": 1, "first": T1, "last": T1}}
    assert profile(control, email="g@x.io") == kept


def test_merge_by_email_with_prioritization(client: httpx.Client, control: httpx.Client) -> None:
    track(client, attributes=[{"email": "dup@x.io", "anon": True},
                              {"external_id": "k", "email": "dup@x.io"},
                              {"external_id": "keep"}])
    body = {"merge_updates": [{
        "identifier_to_merge": {"email": "dup@x.io", "prioritization": ["unidentified"]},
        "identifier_to_keep": {"external_id": "keep"}}]}
    assert client.post("/users/merge", json=body).status_code == 202
    kept = profile(control, external_id="keep")
    assert kept is not None and kept["attributes"]["anon"] is True
    assert len(control.get("/profiles").json()["profiles"]) == 2


def test_merge_ambiguous_email_does_nothing(client: httpx.Client, control: httpx.Client) -> None:
    track(client, attributes=[{"external_id": "x1", "email": "d@x.io"},
                              {"external_id": "x2", "email": "d@x.io"},
                              {"external_id": "keep"}])
    body = {"merge_updates": [{
        "identifier_to_merge": {"email": "d@x.io", "prioritization": ["identified"]},
        "identifier_to_keep": {"external_id": "keep"}}]}
    assert client.post("/users/merge", json=body).status_code == 202
    assert len(control.get("/profiles").json()["profiles"]) == 3


# ---- delete ----------------------------------------------------------------------------------


def test_delete_counts_and_removes(client: httpx.Client, control: httpx.Client) -> None:
    make_alias_only(client)
    track(client, attributes=[{"external_id": "a"}, {"external_id": "b", "email": "b@x.io"}])
    pid = profile(control, external_id="a")
    assert pid is not None
    body = {"external_ids": ["missing"], "user_aliases": [ALIAS],
            "platform_ids": [pid["platform_id"]],
            "email_addresses": [{"email": "b@x.io", "prioritization": ["most_recently_updated"]}]}
    response = client.post("/users/delete", json=body)
    assert (response.status_code, response.json()) == (201, {"deleted": 3})
    assert control.get("/profiles").json()["profiles"] == []


def test_delete_ambiguous_email_deletes_nothing(
    client: httpx.Client, control: httpx.Client
) -> None:
    track(client, attributes=[{"external_id": "a", "email": "s@x.io"},
                              {"external_id": "b", "email": "s@x.io"}])
    body = {"email_addresses": [{"email": "s@x.io", "prioritization": ["identified"]}]}
    assert client.post("/users/delete", json=body).json() == {"deleted": 0}
    assert len(control.get("/profiles").json()["profiles"]) == 2


DELETE_REJECTED: list[tuple[str, Any, str]] = [
    ("51 identifiers", {"external_ids": [f"u{i}" for i in range(30)],
                        "platform_ids": [f"p{i}" for i in range(21)]},
     "a single request may not contain more than 50 identifiers"),
    ("nothing", {}, "one of 'external_ids', 'user_aliases', 'platform_ids' or "
                    "'email_addresses' is required"),
    ("ids not strings", {"external_ids": [1]}, "'external_ids' is not valid"),
    ("email without prioritization", {"email_addresses": [{"email": "a@x.io"}]},
     "'email_addresses' is not valid"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in DELETE_REJECTED],
                         ids=[c[0] for c in DELETE_REJECTED])
def test_delete_rejected(client: httpx.Client, body: Any, message: str) -> None:
    response = client.post("/users/delete", json=body)
    assert (response.status_code, response.json()) == (400, {"message": message})


# ---- identify --------------------------------------------------------------------------------


def test_identify_attaches_external_id(client: httpx.Client, control: httpx.Client) -> None:
    make_alias_only(client, color="red")
    body = {"aliases_to_identify": [{"external_id": "new-id", "user_alias": ALIAS}]}
    response = client.post("/users/identify", json=body)
    assert (response.status_code, response.json()) == (
        201, {"aliases_processed": 1, "message": "success"})
    stored = profile(control, external_id="new-id")
    assert stored is not None and stored["attributes"] == {"color": "red"}
    assert stored["user_aliases"] == [{"alias_label": "crm", "alias_name": "anon-1"}]


def test_identify_merges_into_identified(client: httpx.Client, control: httpx.Client) -> None:
    make_alias_only(client, color="red", size="S")
    track(client, attributes=[{"external_id": "known", "color": "blue"}],
          events=[{"external_id": "known", "name": "seen", "time": T2}])
    body = {"aliases_to_identify": [{"external_id": "known", "user_alias": ALIAS}],
            "merge_behavior": "merge"}
    assert client.post("/users/identify", json=body).status_code == 201
    profiles = control.get("/profiles").json()["profiles"]
    assert len(profiles) == 1
    kept = profiles[0]
    assert kept["external_id"] == "known"
    assert kept["attributes"] == {"color": "blue", "size": "S"}
    assert kept["event_summary"] == {"seen": {"count": 2, "first": T1, "last": T2}}
    assert profile(control, alias_name="anon-1", alias_label="crm") == kept


def test_identify_by_email(client: httpx.Client, control: httpx.Client) -> None:
    track(client, attributes=[{"email": "lead@x.io", "source": "form"}])
    body = {"aliases_to_identify": [], "emails_to_identify": [
        {"external_id": "cust-1", "email": "lead@x.io", "prioritization": ["unidentified"]}]}
    response = client.post("/users/identify", json=body)
    assert (response.status_code, response.json()) == (
        201, {"aliases_processed": 0, "message": "success"})
    stored = profile(control, external_id="cust-1")
    assert stored is not None and stored["attributes"]["source"] == "form"


IDENTIFY_REJECTED: list[tuple[str, Any, str]] = [
    ("nothing", {}, "'aliases_to_identify' is required"),
    ("51 aliases", {"aliases_to_identify": [{"external_id": "x", "user_alias": ALIAS}] * 51},
     "a single request may not contain more than 50 aliases to identify"),
    ("missing alias", {"aliases_to_identify": [{"external_id": "x"}]},
     "'aliases_to_identify' is not valid"),
    ("bad behavior", {"aliases_to_identify": [{"external_id": "x", "user_alias": ALIAS}],
                      "merge_behavior": "sometimes"}, "'merge_behavior' must be 'none' or 'merge'"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in IDENTIFY_REJECTED],
                         ids=[c[0] for c in IDENTIFY_REJECTED])
def test_identify_rejected(client: httpx.Client, body: Any, message: str) -> None:
    response = client.post("/users/identify", json=body)
    assert (response.status_code, response.json()) == (400, {"message": message})


# ---- alias update / new ----------------------------------------------------------------------


def test_alias_update_renames(client: httpx.Client, control: httpx.Client) -> None:
    make_alias_only(client)
    body = {"alias_updates": [
        {"alias_label": "crm", "old_alias_name": "anon-1", "new_alias_name": "anon-2"},
        {"alias_label": "crm", "old_alias_name": "missing", "new_alias_name": "x"}]}
    response = client.post("/users/alias/update", json=body)
    assert (response.status_code, response.json()) == (201, {"message": "success"})
    assert profile(control, alias_name="anon-1", alias_label="crm") is None
    assert profile(control, alias_name="anon-2", alias_label="crm") is not None
    assert profile(control, alias_name="x", alias_label="crm") is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "'alias_updates' must be a non-empty array of objects with string 'alias_label', "
             "'old_alias_name' and 'new_alias_name'"),
        ({"alias_updates": [{"alias_label": "a", "old_alias_name": "b", "new_alias_name": "c"}]
          * 51}, "a single request may not contain more than 50 alias updates"),
    ],
    ids=["missing", "51 updates"],
)
def test_alias_update_rejected(client: httpx.Client, body: Any, message: str) -> None:
    response = client.post("/users/alias/update", json=body)
    assert (response.status_code, response.json()) == (400, {"message": message})


def test_alias_new(client: httpx.Client, control: httpx.Client) -> None:
    track(client, attributes=[{"external_id": "u"}])
    body = {"user_aliases": [{"external_id": "u", "alias_name": "n", "alias_label": "l"},
                             {"alias_name": "solo", "alias_label": "l"}]}
    response = client.post("/users/alias/new", json=body)
    assert (response.status_code, response.json()) == (
        201, {"aliases_processed": 2, "message": "success"})
    attached = profile(control, alias_name="n", alias_label="l")
    assert attached is not None and attached["external_id"] == "u"
    solo = profile(control, alias_name="solo", alias_label="l")
    assert solo is not None and solo["external_id"] is None
