"""Item blobs hold only their own bytes (`items.json_blob`): orjson's result keeps the
oversized buffer it wrote into, so a run's items in flight would each carry one."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import orjson
import pytest

from engage_sync.items import Item, json_blob
from engage_sync.snapshot.kind import _reduced

OBJ = {"external_id": "u00001", "plan": "gold", "city": "Oslo"}


def _held(make: Callable[[], bytes], n: int = 1000) -> float:
    """Bytes traced per blob while `n` of them are alive."""
    tracemalloc.start()
    try:
        blobs = [make() for _ in range(n)]
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(blobs) == n
    return size / n


def test_a_blob_holds_about_its_own_length() -> None:
    blob = json_blob(OBJ)
    assert blob == orjson.dumps(OBJ)
    assert _held(lambda: json_blob(OBJ)) < 4 * len(blob)


def test_a_snapshot_items_reduced_blob_holds_about_its_own_length() -> None:
    item = Item(1, "k", "u00001", "attributes", json_blob(OBJ))
    reduced = _reduced(item, ["plan"], ["plan", "city"])
    assert orjson.loads(reduced.blob) == {"external_id": "u00001", "plan": "gold"}
    assert _held(lambda: _reduced(item, ["plan"], ["plan", "city"]).blob) < 4 * len(reduced.blob)


def test_a_value_json_cannot_hold_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        json_blob({"x": object()})
