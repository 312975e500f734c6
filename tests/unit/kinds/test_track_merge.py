"""A user's payload rows of one run merged into one object (`kinds.track_merge`): each key
from the last row that holds it, the first row's seq and key, the merge's own points; a merge
the service would refuse is not made; which integrations merge (`Kind.merges`)."""

from __future__ import annotations

import json
from typing import Any

import orjson

from engage_sync import kinds
from engage_sync.items import Item
from engage_sync.kinds.track_merge import merge_items
from tests.kind_helpers import integration, run


def _items(*payloads: dict[str, Any], **extra: Any) -> list[Item]:
    i = integration("attributes", None, **extra)
    result, _ = run(i, {"EXTERNAL_ID": ["u1"] * len(payloads),
                        "PAYLOAD": [json.dumps(p) for p in payloads]})
    assert not result.rejects
    return result.items


def test_each_key_comes_from_the_last_row_that_holds_it() -> None:
    items = _items({"plan": "free", "n": 1}, {"plan": "pro"}, {"tier": None})
    merged = merge_items(integration("attributes"), items)
    assert isinstance(merged, Item)
    assert orjson.loads(merged.blob) == {"external_id": "u1", "plan": "pro", "n": 1,
                                         "tier": None}
    assert (merged.seq, merged.key, merged.user, merged.points) == (
        items[0].seq, items[0].key, items[0].user, 3)


def test_the_update_flag_is_not_a_billed_key() -> None:
    merged = merge_items(integration("attributes", update_existing_only=True),
                         _items({"a": 1}, {"b": 2}, update_existing_only=True))
    assert isinstance(merged, Item) and merged.points == 2
    assert orjson.loads(merged.blob)["_update_existing_only"] is True


def test_a_merge_of_more_attributes_than_a_row_may_hold_is_refused() -> None:
    first = {f"a{n}": n for n in range(200)}
    later = {f"b{n}": n for n in range(100)}
    said = merge_items(integration("attributes"), _items(first, later))
    assert said == "more than 250 attributes in one row"


def test_only_payload_attributes_merge() -> None:
    attributes = kinds.kind_of(integration("attributes"))
    assert attributes.merges(integration("attributes"))
    assert not attributes.merges(integration("attributes", superseded_rows="send"))
    mapped = integration("attributes", mapping={"identifier": {"external_id": "USER_ID"},
                                                "attributes": {"PLAN": "plan"}})
    assert attributes.superseded_by(mapped) == ("USER_ID",) and not attributes.merges(mapped)
    events = integration("events", row_key=["EVENT_ID"])
    assert not kinds.kind_of(events).merges(events)
