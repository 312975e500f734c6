"""Properties of the packers of the subscription and identity kinds, on random item streams.

For every packer: no item lost or duplicated, order kept (so order per user too), at most
`ids_per_request` items per request, positions point at each item's own value in the body,
and a request is cut only when the next item would break a rule. Per kind: subscription
objects hold one list of at most 50 entries, emails and phones never share an object, no
(user, group) twice in one request; a delete request holds one identifier kind; identify,
merge and rename requests never name one user twice.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from engage_sync import kinds
from engage_sync.config.files import parse_integration
from engage_sync.config.integration import Integration
from engage_sync.items import USER_SEP, Item, users_of
from engage_sync.pack.batching import Batch

SECTIONS: dict[str, dict[str, Any]] = {
    "subscriptions": {"group_id": "g"},
    "deletes": {},
    "identify": {"alias_name": "N", "alias_label": "L"},
    "merges": {"merge": {"external_id": "M"}, "keep": {"external_id": "K"}},
    "alias_renames": {},
}


def integration(kind: str, limit: int, **section: Any) -> Integration:
    return parse_integration({
        "kind": kind, "source": {"table": "t"}, kind: {**SECTIONS[kind], **section},
        "service": {"limits": {"ids_per_request": limit}}}, file="p.yaml")


def pack(i: Integration, items: list[Item]) -> list[Batch]:
    packer = kinds.kind_of(i).packer(i)
    out = [b for b in (packer.add(x) for x in items) if b is not None]
    last = packer.flush()
    return out + ([last] if last else [])


_PATH = re.compile(r"subscription_groups\[(\d+)\]\.(\w+)")


def value_at(body: dict[str, Any], array: str) -> list[Any]:
    match = _PATH.fullmatch(array)
    if match:
        return list(body["subscription_groups"][int(match.group(1))][match.group(2)])
    return list(body[array])


def check_common(items: list[Item], batches: list[Batch], limit: int) -> None:
    assert [x for b in batches for x in b.items] == items  # none lost, none twice, in order
    for batch in batches:
        assert 1 <= len(batch.items) <= limit
        body = orjson.loads(batch.body)
        assert len(set(batch.positions)) == len(batch.positions)
        for item, (array, index) in zip(batch.items, batch.positions, strict=True):
            assert value_at(body, array)[index] == orjson.loads(item.blob)


users = st.sampled_from([f"u{k}" for k in range(8)])


@st.composite
def subscription_items(draw: st.DrawFn) -> list[Item]:
    out = []
    for seq in range(draw(st.integers(0, 200))):
        array = draw(st.sampled_from(["external_ids", "emails", "phones"]))
        name = draw(users)
        value = {"external_ids": name, "emails": f"{name}@x.io", "phones": "+1555000"
                 + name[1:]}[array]
        group = (draw(st.sampled_from(["g1", "g2", "g3"])),
                 draw(st.sampled_from(["subscribed", "unsubscribed"])))
        out.append(Item(seq, str(seq), f"{array}:{value}", array, orjson.dumps(value), group))
    return out


@settings(max_examples=150, deadline=None)
@given(items=subscription_items(), limit=st.integers(1, 50))
def test_v2_subscription_requests_keep_every_limit(items: list[Item], limit: int) -> None:
    batches = pack(integration("subscriptions", limit), items)
    check_common(items, batches, limit)
    for batch in batches:
        body = orjson.loads(batch.body)
        total = 0
        for obj in body["subscription_groups"]:
            lists = [k for k in ("external_ids", "emails", "phones") if k in obj]
            assert len(lists) == 1  # so emails and phones never share an object
            assert 1 <= len(obj[lists[0]]) <= 50
            total += len(obj[lists[0]])
        assert total == len(batch.items) <= min(limit, 50)
        pairs = [(x.user, x.group[0]) for x in batch.items]
        assert len(set(pairs)) == len(pairs)
    for before, after in pairwise(batches):  # cut only when needed
        first = after.items[0]
        assert len(before.items) == limit or (first.user, first.group[0]) in {
            (x.user, x.group[0]) for x in before.items}


@settings(max_examples=100, deadline=None)
@given(items=subscription_items(), limit=st.integers(1, 50))
def test_v1_subscription_requests_hold_one_group_state_and_list(items: list[Item],
                                                                 limit: int) -> None:
    batches = pack(integration("subscriptions", limit, endpoint="v1"), items)
    check_common(items, batches, limit)
    for batch in batches:
        assert len({(x.group, x.array) for x in batch.items}) == 1
        body = orjson.loads(batch.body)
        lists = [k for k in ("external_id", "email", "phone") if k in body]
        assert len(lists) == 1 and len(body[lists[0]]) == len(batch.items)
        assert body["subscription_group_id"] == batch.items[0].group[0]


DELETE_ARRAYS = {"external_ids": lambda u: u, "platform_ids": lambda u: "p" + u,
                 "user_aliases": lambda u: {"alias_name": u, "alias_label": "crm"},
                 "email_addresses": lambda u: {"email": f"{u}@x.io",
                                               "prioritization": ["identified"]}}


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(sorted(DELETE_ARRAYS)), users), max_size=200),
       limit=st.integers(1, 50))
def test_delete_requests_hold_one_identifier_kind(rows: list[tuple[str, str]],
                                                  limit: int) -> None:
    items = [Item(k, str(k), f"{a}:{u}", a, orjson.dumps(DELETE_ARRAYS[a](u)))
             for k, (a, u) in enumerate(rows)]
    batches = pack(integration("deletes", limit), items)
    check_common(items, batches, limit)
    for batch in batches:
        assert len(orjson.loads(batch.body)) == 1  # one identifier list per request
        assert len({x.array for x in batch.items}) == 1
    for before, after in pairwise(batches):
        assert len(before.items) == limit or before.items[0].array != after.items[0].array


def _pair_items(kind: str, pairs: list[tuple[str, str]]) -> list[Item]:
    array, make = {
        "identify": ("aliases_to_identify", lambda a, b: {
            "external_id": b, "user_alias": {"alias_name": a, "alias_label": "crm"}}),
        "merges": ("merge_updates", lambda a, b: {"identifier_to_merge": {"external_id": a},
                                                  "identifier_to_keep": {"external_id": b}}),
        "alias_renames": ("alias_updates", lambda a, b: {
            "alias_label": "crm", "old_alias_name": a, "new_alias_name": b}),
    }[kind]
    return [Item(k, str(k), a + USER_SEP + b, array, orjson.dumps(make(a, b)))
            for k, (a, b) in enumerate(pairs)]


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(["identify", "merges", "alias_renames"]),
       pairs=st.lists(st.tuples(users, users), max_size=200), limit=st.integers(1, 50))
def test_identity_requests_never_name_one_user_twice(kind: str, pairs: list[tuple[str, str]],
                                                     limit: int) -> None:
    items = _pair_items(kind, pairs)
    batches = pack(integration(kind, limit), items)
    check_common(items, batches, limit)
    for batch in batches:
        named = [u for x in batch.items for u in set(users_of(x))]
        assert len(named) == len(set(named))
    for before, after in pairwise(batches):
        seen = {u for x in before.items for u in users_of(x)}
        assert len(before.items) == limit or not seen.isdisjoint(users_of(after.items[0]))
    if kind == "identify":
        for batch in batches:
            assert "aliases_to_identify" in orjson.loads(batch.body)
