"""Subscription-group states: rows → items, items → /v2/subscription/status/set or
/subscription/status/set requests. Pure.

A row is (user, group, state); its item is the identifier's JSON value destined for the list
`external_ids`, `emails` or `phones` (`Item.array`), with `Item.group = (group_id, state)`.

Packing invariants (property-tested):
- at most `ids_per_request` (≤ 50) identifiers per request, so at most 50 per object and list;
- one object per (group, state, identifier list): emails and phones never share an object;
- v1 requests hold one group, one state and one identifier list each;
- a request never holds two rows of the same (user, group): the request is cut instead, and
  the sender never has two requests of one user in flight, so row order per user holds;
- items stay in row order and each is in exactly one request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa

from engage_sync import validate as v
from engage_sync.config.integration import Integration
from engage_sync.config.sections import SubscriptionSpec
from engage_sync.config.track_formats import TrackGroup
from engage_sync.items import Item, TransformResult
from engage_sync.kinds.base import Kind
from engage_sync.kinds.rows import Outcomes, Rows, UserRef, read_users
from engage_sync.pack.batching import Built, ListPacker, Packer

V2 = "/v2/subscription/status/set"
V1 = "/subscription/status/set"
LISTS = {"external_id": "external_ids", "email": "emails", "phone": "phones"}
V1_FIELDS = {"external_ids": "external_id", "emails": "email", "phones": "phone"}


def spec_of(integration: Integration) -> SubscriptionSpec:
    spec = integration.kind_spec
    assert isinstance(spec, SubscriptionSpec)
    return spec


def transform(integration: Integration, batch: pa.RecordBatch, first_seq: int
              ) -> TransformResult:
    """One item per valid row; a reject naming the column for a bad user, group or state."""
    spec = spec_of(integration)
    rows = Rows(batch)
    out = Outcomes(first_seq, rows.keys(integration.key_columns))
    users = read_users(spec.user, rows)
    groups = rows(spec.group_column) if spec.group_column else [spec.group_id] * rows.n
    group_label = spec.group_column or "group_id"
    states = rows(spec.state_column)
    for i, ref in enumerate(users):
        problem = ref if isinstance(ref, str) else (
            _missing(groups[i], group_label) or v.check_group_id(groups[i], group_label)
            or _missing(states[i], spec.state_column)
            or v.check_subscription_state(states[i], spec.state_column))
        if problem is not None:
            out.reject(i, problem)
            continue
        assert isinstance(ref, UserRef)
        out.item(i, ref.user, LISTS[ref.kind], ref.value, (str(groups[i]), str(states[i])))
    return out.result()


def _missing(value: Any, column: str) -> str | None:
    return f"{column} is missing (NULL)" if value is None else None


def endpoint(integration: Integration) -> str:
    """v2, or v1 when `subscriptions.endpoint` says so."""
    return V1 if spec_of(integration).endpoint == "v1" else V2


def packer(integration: Integration) -> Packer:
    """The packer of the integration's endpoint."""
    limit = integration.service.limits.ids_per_request
    if endpoint(integration) == V1:
        return ListPacker(V1, limit, build_v1, conflicts=_user_group,
                          compatible=lambda a, b: (a.group, a.array) == (b.group, b.array))
    return ListPacker(V2, limit, build_v2, conflicts=_user_group)


def _user_group(item: Item) -> tuple[str]:
    return (f"{item.user}\x1f{item.group[0]}",)


def build_v2(items: list[Item]) -> Built:
    """`{"subscription_groups": [objects]}`, one object per (group, state, list), in order of
    first appearance; positions are (`subscription_groups[k].<list>`, index in that list)."""
    objects: dict[tuple[str, str, str], list[bytes]] = {}
    positions = []
    for item in items:
        key = (item.group[0], item.group[1], item.array)
        blobs = objects.setdefault(key, [])
        positions.append((f"subscription_groups[{list(objects).index(key)}].{item.array}",
                          len(blobs)))
        blobs.append(item.blob)
    parts = [_object(group, state, array, blobs)
             for (group, state, array), blobs in objects.items()]
    return b'{"subscription_groups":[' + b",".join(parts) + b"]}", tuple(positions)


def build_v1(items: list[Item]) -> Built:
    """One group, state and list: `{"subscription_group_id", "subscription_state", "<list>"}`
    with the v1 list names `external_id`, `email`, `phone`."""
    group, state = items[0].group
    field = V1_FIELDS[items[0].array]
    body = _object(group, state, field, [i.blob for i in items])
    return body, tuple((field, k) for k in range(len(items)))


def _object(group: str, state: str, field: str, blobs: list[bytes]) -> bytes:
    return (b'{"subscription_group_id":' + orjson.dumps(group)
            + b',"subscription_state":' + orjson.dumps(state)
            + b',"' + field.encode() + b'":[' + b",".join(blobs) + b"]}")


def _columns(integration: Integration) -> list[str]:
    return list(spec_of(integration).data_columns())


def _user_column(integration: Integration) -> str | None:
    """Partitionable when rows name users by one identifier kind only: with several (a row
    fills one of them), one user's rows could hash apart."""
    kinds = spec_of(integration).user.kinds()
    return kinds[0][1][0] if len(kinds) == 1 else None


SUBSCRIPTIONS = Kind(name="subscriptions", rank=30, idempotent=True, columns=_columns,
                     transform=transform, packer=packer, endpoint=endpoint,
                     section="subscriptions", user_column=_user_column)


# --- subscription_groups inside /users/track attributes ----------------------------------


def track_groups(groups: tuple[TrackGroup, ...], column: Callable[[str], list[Any]], n: int
                 ) -> list[list[dict[str, str]] | str]:
    """Per row the `subscription_groups` entries (groups whose state is NULL are left out),
    or the reason the row breaks a rule (a missing group id, a state other than subscribed or
    unsubscribed)."""
    out: list[list[dict[str, str]] | str] = [[] for _ in range(n)]
    for spec in groups:
        states = column(spec.state_column)
        ids = column(spec.group_column) if spec.group_column else [spec.group_id] * n
        label = spec.group_column or "group_id"
        for i in range(n):
            entries = out[i]
            if isinstance(entries, str) or states[i] is None:
                continue
            gid = str(ids[i]) if type(ids[i]) is int else ids[i]
            problem = (_missing(gid, label) or v.check_group_id(gid, label)
                       or v.check_subscription_state(states[i], spec.state_column))
            if problem is not None:
                out[i] = problem
                continue
            entries.append({"subscription_group_id": str(gid),
                            "subscription_state": str(states[i])})
    return out
