"""engage-sync's per-row attribute checks and the sandbox's item errors agree on every
value shape below: what the validator lets through, the sandbox takes; what it rejects, the
sandbox answers with an item error for that object alone (never a 500)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engage_sync import validate

GROUP = {"subscription_group_id": "g1", "subscription_state": "subscribed"}
SHAPES: list[tuple[str, Any]] = [
    ("tags", ["a", "b"]), ("tags", {"add": ["a"]}), ("tags", {"remove": []}),
    ("tags", {"add": ["a"], "remove": ["b"]}), ("pets", {"update": [{"id": 1}]}),
    ("tags", {"add": 5}), ("tags", {"add": "abc"}), ("tags", {"remove": None}),
    ("tags", {"add": [1]}), ("tags", {"add": [["a"]]}), ("pets", {"update": ["x"]}),
    ("pets", {"update": {"id": 1}}), ("nested", {"add": 5, "other": 1}), ("nested", {}),
    ("email_subscribe", "opted_in"), ("email_subscribe", "subscribed"),
    ("email_subscribe", "yes"), ("email_subscribe", 1),
    ("subscription_groups", [GROUP]), ("subscription_groups", []),
    ("subscription_groups", GROUP), ("subscription_groups", [{**GROUP, "subscription_state": "x"}]),
    ("subscription_groups", [{"subscription_state": "subscribed"}]),
    ("subscription_groups", ["g1"]),
]


@pytest.mark.parametrize(("name", "value"), SHAPES, ids=[f"{n}={v!r}" for n, v in SHAPES])
def test_validator_and_sandbox_agree(client: httpx.Client, name: str, value: Any) -> None:
    ours = validate.check_attribute_value(name, value)
    objects = [{"external_id": "before", "a": 1}, {"external_id": "u", name: value},
               {"external_id": "after", "a": 1}]
    response = client.post("/users/track", json={"attributes": objects})
    assert response.status_code == 201, response.text
    errors = response.json().get("errors", [])
    assert [e["index"] for e in errors] == ([] if ours is None else [1]), (ours, errors)
