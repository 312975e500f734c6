"""The fuzz test: a thousand malformed rows of every shape (bad JSON, wrong types,
NULL and odd ids, huge strings, bad times, NaN, nested junk, array operations whose operands
are not arrays) among good rows, for attributes and events, against the sandbox. Every bad
row is rejected with its reason, or delivered as the service takes it (applied, or refused
with an item error that names it); every good row is delivered; nothing crashes; and the
record's counts add up to the rows read."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, Warehouse, table_integration

GOOD, BAD_ATTRIBUTES, BAD_EVENTS = 300, 600, 400
Shape = Callable[[random.Random], Any]

JUNK: list[Shape] = [
    lambda r: "{bad",                                              # not JSON
    lambda r: r.choice(["[]", "42", "null", '"text"', ""]),        # JSON, not an object
    lambda r: '{"x": NaN}', lambda r: '{"x": Infinity}',           # NaN, infinities
    lambda r: {"s": "x" * r.choice([256, 5000, 200_000])},         # huge strings
    lambda r: {"$bad": 1}, lambda r: {"": 1}, lambda r: {"k" * 300: 1},  # bad names
    lambda r: {"tags": {"add": r.choice([5, "abc", None, {"a": 1}, [1, 2]])}},
    lambda r: {"tags": {"remove": r.choice(["x", 3.5, [None], [[]]])}},
    lambda r: {"tags": {"update": r.choice(["x", [1], [None], {}])}},
    lambda r: {"tags": {"add": ["a"], "junk": 1}},
    lambda r: {"n": {"a": {"b": {"c": [{"d": None}, [1, [2, [3]]]]}}}},  # nested junk
    lambda r: {"d": r.choice(["2026-13-45T99:00:00Z", "not a time", "0000-00-00"])},
    lambda r: {"email_subscribe": r.choice(["maybe", 5, None])},
    lambda r: {"first_name": r.choice([5, ["a"], {"b": 1}, True])},
    lambda r: {f"k{i}": i for i in range(r.choice([251, 300]))},   # too many attributes
]

EVENT_JUNK: list[Shape] = [
    lambda r: "{bad", lambda r: "[]",
    lambda r: {"name": "x", "time": r.choice(["not a time", "2026-02-30T00:00:00Z", 5, None])},
    lambda r: {"name": r.choice(["", None, 5, "n" * 300])},
    lambda r: {"name": "x", "properties": r.choice(["str", 5, [1], {"$p": 1}])},
    lambda r: {"name": "x", "properties": {"s": "y" * 300}},
    lambda r: '{"name": "x", "properties": {"v": NaN}}',
    lambda r: {"name": "x", "properties": {"deep": {"a": [{"b": [{"c": {}}]}]}}},
    lambda r: {"name": "x", "extra_field": 1},
    lambda r: {"name": "x", "properties": {"big": "z" * 120_000}},
]

ODD_IDS = [None, "", "   ", "i" * 513]


def _text(payload: Any) -> str:
    return payload if isinstance(payload, str) else json.dumps(payload)


def _attribute_rows(rng: random.Random) -> tuple[list[dict[str, Any]], set[str]]:
    rows = [{"external_id": f"g{i:04d}", "payload": json.dumps({"good": i})}
            for i in range(GOOD)]
    odd = 0
    for i in range(BAD_ATTRIBUTES):
        ext: str | None = f"b{i:04d}"
        if rng.random() < 0.08:
            ext, odd = rng.choice(ODD_IDS), odd + 1
        rows.append({"external_id": ext, "payload": _text(rng.choice(JUNK)(rng))})
    rng.shuffle(rows)
    for k, row in enumerate(rows):
        row["updated_at"] = T0 + timedelta(milliseconds=k // 3)  # ties: three rows a time
    return rows, {r["external_id"] for r in rows if str(r["external_id"]).startswith("b")}


def _event_rows(rng: random.Random) -> list[dict[str, Any]]:
    rows = [{"event_id": f"g{i:04d}", "external_id": f"u{i % 40}",
             "payload": json.dumps({"name": "ok", "properties": {"eid": f"g{i:04d}"}})}
            for i in range(GOOD)]
    for i in range(BAD_EVENTS):
        payload = rng.choice(EVENT_JUNK)(rng)
        if isinstance(payload, dict) and isinstance(payload.get("properties"), dict):
            payload["properties"]["eid"] = f"b{i:04d}"
        rows.append({"event_id": None if rng.random() < 0.03 else f"b{i:04d}",
                     "external_id": rng.choice([f"u{i % 40}", None, ""]) if rng.random() < 0.1
                     else f"u{i % 40}", "payload": _text(payload)})
    rng.shuffle(rows)
    for k, row in enumerate(rows):
        row["updated_at"] = T0 + timedelta(milliseconds=k // 3)  # ties: three rows a time
    return rows


def _sync(path: Path, state: StateStore) -> dict[str, Any]:
    record = sync_file(path, store=state).record
    assert record is not None
    assert record["rows_read"] == record["rows_synced"] + record["rows_failed_with_errors"] \
        + record["rows_in_doubt"]
    assert record["rows_in_doubt"] == 0
    return record


def _named(state: StateStore, name: str) -> dict[str, str]:
    errors = state.errors(name, limit=100_000)
    assert all(e["reason"] for e in errors)
    return {e["row_key"]: e["reason"] for e in errors if e["kind"] in ("rejected", "failed")}


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_fuzz_attributes(warehouse: Warehouse, service: Service, state: StateStore,
                         tmp_path: Path) -> None:
    rows, bad_ids = _attribute_rows(random.Random(7))
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    record = _sync(path, state)
    assert record["rows_read"] == len(rows)
    named = _named(state, "users")
    profiles = {p["external_id"]: p["attributes"] for p in service.profiles()}
    for i in range(GOOD):  # every good row delivered
        assert profiles[f"g{i:04d}"].get("good") == i
        assert f"g{i:04d}" not in named
    for ext in bad_ids:  # rejected with its reason, or delivered as the service took it
        assert (ext in named) != (ext in profiles), ext
    _each_row_ends_once(state, "users", record, len(rows))


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_fuzz_events(warehouse: Warehouse, service: Service, state: StateStore,
                     tmp_path: Path) -> None:
    rows = _event_rows(random.Random(11))
    path = table_integration(warehouse, service, tmp_path, "events", rows)
    record = _sync(path, state)
    assert record["rows_read"] == len(rows)
    named = _named(state, "events")
    arrived = set(service.event_ids())
    for i in range(GOOD):
        assert f"g{i:04d}" in arrived and f"g{i:04d}" not in named
    for row in rows:  # a bad event that arrived was taken by the service: never named
        eid = row["event_id"]
        if eid is not None and eid.startswith("b") and eid in arrived:
            assert eid not in named, eid
    _each_row_ends_once(state, "events", record, len(rows))


def _each_row_ends_once(state: StateStore, name: str, record: dict[str, Any],
                        rows: int) -> None:
    """One error per row not synced (rejected or refused, NULL keys included), no more."""
    errors = state.errors(name, limit=100_000)
    assert len(errors) == record["rows_failed_with_errors"]
    assert record["rows_synced"] + len(errors) == rows
