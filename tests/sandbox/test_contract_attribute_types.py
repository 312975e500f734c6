"""POST /users/track drops, silently as the service does, a value whose type cannot be its
attribute's `data_type` in the seed's definitions, and any value of a blocklisted attribute;
the item is processed and its other attributes stored (demo seed: `region` Number, `pets`
Array, `zodiac_sign` String, `has_app` Boolean, `employer` Number and blocklisted)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engage_sandbox.handlers.attribute_types import fits
from tests.sandbox.conftest import profile


def _stored(client: httpx.Client, control: httpx.Client, item: dict[str, Any]
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    response = client.post("/users/track", json={"attributes": [{"external_id": "u1", **item}]})
    assert response.status_code == 201
    found = profile(control, external_id="u1")
    assert found is not None
    return response.json(), found["attributes"]


def test_values_of_the_wrong_type_and_blocklisted_values_are_dropped_silently(
    client: httpx.Client, control: httpx.Client
) -> None:
    answer, stored = _stored(client, control, {
        "region": "north", "pets": "cat", "zodiac_sign": 7, "has_app": "yes",
        "employer": 12, "undefined_here": "kept", "tier": "gold"})
    assert answer == {"message": "success", "attributes_processed": 1}  # no error item
    assert stored == {"undefined_here": "kept", "tier": "gold"}
    counters = control.get("/counters").json()
    assert counters["data_points"] == 7  # each key sent is billed, stored or not


def test_values_of_the_defined_type_are_stored(
    client: httpx.Client, control: httpx.Client
) -> None:
    _, stored = _stored(client, control, {"region": 3, "pets": ["cat"], "zodiac_sign": "leo",
                                          "has_app": True})
    assert stored == {"region": 3, "pets": ["cat"], "zodiac_sign": "leo", "has_app": True}
    _, stored = _stored(client, control, {"region": None, "pets": {"add": ["dog"]}})
    assert stored == {"pets": ["cat", "dog"], "zodiac_sign": "leo", "has_app": True}


@pytest.mark.parametrize("value, data_type, expected", [
    (1, "Number", True), (1.5, "Number", True), (True, "Number", False), ("1", "Number", False),
    ("x", "String", True), (1, "String", False), (False, "Boolean", True), (0, "Boolean", False),
    ("2026-01-01T00:00:00Z", "Time", True), (1, "Time", False), ([1], "Array", True),
    ({"remove": [1]}, "Array", True), ("a", "Array", False), ({"a": 1}, "Object", True),
    ({"add": [1]}, "Object", False), (None, "Number", True), ("x", "Geo", True),
])
def test_which_values_fit_a_data_type(value: Any, data_type: str, expected: bool) -> None:
    assert fits(value, data_type) is expected
