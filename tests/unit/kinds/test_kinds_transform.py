"""Rows of the subscription and identity kinds → items and rejects, and the requests built
from them. Table cases per kind, then a property over random rows: every row is accounted
for, no reason shows a value, and the sandbox (an independent implementation of the service)
accepts every request built from valid rows: the 400 messages never happen."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from engage_sync import kinds
from engage_sync.config.files import parse_integration
from engage_sync.items import USER_SEP
from engage_sync.kinds.track_transform import transform_batch
from tests.kind_helpers import SUBS, bodies, integration, run

# --- subscriptions -------------------------------------------------------------------------



def test_subscription_rows_become_grouped_objects_and_bad_rows_are_rejected() -> None:
    i = integration("subscriptions", SUBS, row_key=["ID"])
    result, batches = run(i, {
        "ID": [1, 2, 3, 4, 5, 6, 7, 8],
        "EXTERNAL_ID": ["u1", None, None, "u2", None, "u3", "u4", None],
        "EMAIL": [None, "A@x.io", None, None, None, "u3@x.io", None, None],
        "PHONE": [None, None, "+15551230000", None, "5551230000", None, None, None],
        "GROUP_ID": ["g1", "g1", "g2", "g1", "g2", "g1", None, "g1"],
        "STATE": ["subscribed", "unsubscribed", "subscribed", "subscribed", "subscribed",
                  "subscribed", "subscribed", "subscribed"],
    })
    assert [(r.key, r.reason) for r in result.rejects] == [
        ("5", "PHONE is not an E.164 phone number ('+' and 2 to 15 digits)"),
        ("6", "more than one identifier given (EXTERNAL_ID, EMAIL); give exactly one per row"),
        ("7", "GROUP_ID is missing (NULL)"),
        ("8", "no identifier: EXTERNAL_ID, EMAIL, PHONE are all missing (NULL)"),
    ]
    (body,) = bodies(batches)
    assert body == {"subscription_groups": [
        {"subscription_group_id": "g1", "subscription_state": "subscribed",
         "external_ids": ["u1", "u2"]},
        {"subscription_group_id": "g1", "subscription_state": "unsubscribed",
         "emails": ["A@x.io"]},
        {"subscription_group_id": "g2", "subscription_state": "subscribed",
         "phones": ["+15551230000"]},
    ]}
    assert batches[0].endpoint == "/v2/subscription/status/set"
    assert batches[0].group == "subscription"


@pytest.mark.parametrize("state", ["Subscribed", "opted_in", "", None])
def test_a_state_other_than_subscribed_or_unsubscribed_is_rejected(state: str | None) -> None:
    i = integration("subscriptions", {"group_id": "g", "state_column": "STATE"})
    result, _ = run(i, {"EXTERNAL_ID": ["u1"], "STATE": [state]})
    (reject,) = result.rejects
    assert reject.reason.startswith("STATE ")


def test_v1_sends_one_group_state_and_list_per_request() -> None:
    i = integration("subscriptions", {**SUBS, "endpoint": "v1"}, row_key=["ID"])
    _, batches = run(i, {
        "ID": [1, 2, 3, 4], "EXTERNAL_ID": ["u1", "u2", None, "u3"],
        "EMAIL": [None, None, "e@x.io", None], "PHONE": [None] * 4,
        "GROUP_ID": ["g1", "g1", "g1", "g2"], "STATE": ["subscribed"] * 4,
    })
    assert [b.endpoint for b in batches] == ["/subscription/status/set"] * 3
    assert bodies(batches) == [
        {"subscription_group_id": "g1", "subscription_state": "subscribed",
         "external_id": ["u1", "u2"]},
        {"subscription_group_id": "g1", "subscription_state": "subscribed", "email": ["e@x.io"]},
        {"subscription_group_id": "g2", "subscription_state": "subscribed", "external_id": ["u3"]},
    ]


def test_the_same_user_and_group_twice_cuts_the_request() -> None:
    i = integration("subscriptions", {"group_id": "g", "state_column": "S"}, row_key=["ID"])
    _, batches = run(i, {"ID": [1, 2, 3], "EXTERNAL_ID": ["u1", "u2", "u1"],
                         "S": ["subscribed", "subscribed", "unsubscribed"]})
    assert [len(b.items) for b in batches] == [2, 1]


def test_subscription_groups_inside_track_attributes() -> None:
    i = parse_integration({"kind": "attributes", "source": {"table": "t"}, "mapping": {
        "identifier": {"external_id": "ID"}, "attributes": {"PLAN": "plan"},
        "subscription_groups": [{"group_id": "news", "state_column": "NEWS"},
                                {"group_column": "SMS_GROUP", "state_column": "SMS"}]}},
        file="a.yaml")
    assert kinds.kind_of(i).columns(i) == ["ID", "PLAN", "NEWS", "SMS_GROUP", "SMS"]
    batch = pa.RecordBatch.from_pydict({
        "ID": ["u1", "u2", "u3"], "PLAN": ["a", "b", "c"],
        "NEWS": ["subscribed", None, "yes"], "SMS_GROUP": ["s1", "s1", "s1"],
        "SMS": [None, "unsubscribed", "subscribed"]})
    result = transform_batch(i, batch, 0)
    assert [orjson.loads(x.blob) for x in result.items] == [
        {"external_id": "u1", "plan": "a", "subscription_groups": [
            {"subscription_group_id": "news", "subscription_state": "subscribed"}]},
        {"external_id": "u2", "plan": "b", "subscription_groups": [
            {"subscription_group_id": "s1", "subscription_state": "unsubscribed"}]},
    ]
    assert [r.reason for r in result.rejects] == ["NEWS must be 'subscribed' or 'unsubscribed'"]


# --- identity ------------------------------------------------------------------------------


def test_deletes_in_the_service_format_cut_when_the_identifier_kind_changes() -> None:
    i = integration("deletes", {"identifiers": ["external_id", "user_alias", "email"],
                                "prioritization": ["identified"]}, row_key=["ID"])
    result, batches = run(i, {
        "ID": [1, 2, 3, 4, 5, 6],
        "EXTERNAL_ID": ["u1", "u2", None, None, "u3", None],
        "ALIAS_NAME": [None, None, "n1", None, None, "n2"],
        "ALIAS_LABEL": [None, None, "crm", None, None, None],
        "EMAIL": [None, None, None, "e@x.io", None, None],
    })
    assert [r.reason for r in result.rejects] == ["ALIAS_LABEL is missing (NULL)"]
    assert bodies(batches) == [
        {"external_ids": ["u1", "u2"]},
        {"user_aliases": [{"alias_name": "n1", "alias_label": "crm"}]},
        {"email_addresses": [{"email": "e@x.io", "prioritization": ["identified"]}]},
        {"external_ids": ["u3"]},
    ]
    assert {b.group for b in batches} == {"identity"}


def test_identify_aliases_and_emails() -> None:
    i = integration("identify", {"alias_name": "N", "alias_label": "L", "email": "E",
                                 "prioritization": ["unidentified", "most_recently_updated"]},
                    row_key=["ID"])
    result, batches = run(i, {"ID": [1, 2, 3, 4], "N": ["a1", None, "a2", "a3"],
                              "L": ["crm", None, "crm", "crm"],
                              "E": [None, "e@x.io", None, "z@x.io"],
                              "EXTERNAL_ID": ["u1", "u2", None, "u4"]})
    assert [r.reason for r in result.rejects] == [
        "EXTERNAL_ID is missing (NULL)",
        "more than one identifier given (N, E); give exactly one per row"]
    assert bodies(batches) == [{
        "aliases_to_identify": [{"external_id": "u1", "user_alias": {
            "alias_name": "a1", "alias_label": "crm"}}],
        "emails_to_identify": [{"external_id": "u2", "email": "e@x.io",
                                "prioritization": ["unidentified", "most_recently_updated"]}],
    }]
    assert result.items[0].user == "user_alias:crm:a1" + USER_SEP + "external_id:u1"


def test_merges_build_identifier_objects_and_reject_what_the_service_would_refuse() -> None:
    i = integration("merges", {
        "merge": {"external_id": "OLD_ID", "phone": "OLD_PHONE",
                  "prioritization": ["most_recently_updated"]},
        "keep": {"external_id": "KEEP_ID", "alias_name": "KN", "alias_label": "KL"}},
        row_key=["ID"])
    result, batches = run(i, {
        "ID": [1, 2, 3, 4, 5],
        "OLD_ID": ["a", None, "c", "d", ""],
        "OLD_PHONE": [None, "+4915112345678", None, None, None],
        "KEEP_ID": ["b", "b2", None, "d", "x"],
        "KN": [None, None, "n", None, None],
        "KL": [None, None, "crm", None, None],
    })
    assert [(r.key, r.reason) for r in result.rejects] == [
        ("4", "identifier_to_merge and identifier_to_keep name the same user"),
        ("5", "identifier_to_merge: OLD_ID is empty")]
    assert bodies(batches) == [{"merge_updates": [
        {"identifier_to_merge": {"external_id": "a"}, "identifier_to_keep": {"external_id": "b"}},
        {"identifier_to_merge": {"phone_number": "+4915112345678",
                                 "prioritization": ["most_recently_updated"]},
         "identifier_to_keep": {"external_id": "b2"}},
        {"identifier_to_merge": {"external_id": "c"},
         "identifier_to_keep": {"user_alias": {"alias_name": "n", "alias_label": "crm"}}},
    ]}]


def test_a_chain_of_merges_goes_to_consecutive_requests() -> None:
    i = integration("merges", {"merge": {"external_id": "M"}, "keep": {"external_id": "K"}})
    _, batches = run(i, {"M": ["a", "b", "x"], "K": ["b", "c", "y"]})
    assert [len(b.items) for b in batches] == [1, 2]


def test_alias_renames() -> None:
    i = integration("alias_renames", {})
    result, batches = run(i, {"ALIAS_LABEL": ["crm", "crm", None],
                              "OLD_ALIAS_NAME": ["a", "b", "c"],
                              "NEW_ALIAS_NAME": ["a2", "b2", "c2"]})
    assert [r.reason for r in result.rejects] == ["ALIAS_LABEL is missing (NULL)"]
    assert bodies(batches) == [{"alias_updates": [
        {"alias_label": "crm", "old_alias_name": "a", "new_alias_name": "a2"},
        {"alias_label": "crm", "old_alias_name": "b", "new_alias_name": "b2"}]}]
    assert batches[0].endpoint == "/users/alias/update"


def test_integer_ids_are_sent_as_text_and_keyed_by_their_digits() -> None:
    i = integration("deletes")
    result, batches = run(i, {"EXTERNAL_ID": [42, 7]})
    assert [x.key for x in result.items] == ["42", "7"]
    assert bodies(batches) == [{"external_ids": ["42", "7"]}]
