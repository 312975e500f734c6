"""Adding a kind is one module and one registry line: a toy kind runs end to end against the
sandbox, with its rows accounted for and its place in a folder's order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engage_sync import kinds
from engage_sync.adapters.wiring import sync_file
from engage_sync.run.folder import run_order
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    integration_body,
    users_table,
    write_integration,
)
from tests.integration.toy_kind import TOUCHES


@pytest.fixture
def touches() -> Iterator[None]:
    kinds.register(TOUCHES)  # the one registry line
    yield
    kinds.unregister(TOUCHES.name)


def test_a_new_kind_runs_end_to_end(touches: None, warehouse: Warehouse, service: Service,
                                    state: StateStore, tmp_path: Path) -> None:
    users_table(warehouse)
    warehouse.insert("users_sync", [
        {"updated_at": T0, "external_id": f"t{i}", "payload": "{}"} for i in range(100)])
    body = integration_body(warehouse, service, "touches", "users_sync")
    del body["row_key"]  # the default key of a payload kind: identifier and PAYLOAD
    path = write_integration(tmp_path, "touches", body)
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["rows_read"], record["rows_synced"], record["rows_rejected"]) == (100, 100, 0)
    profile = service.profile("t7")
    assert profile is not None
    assert profile["attributes"]["last_touched"] == "2026-01-01T00:00:00Z"
    assert len(service.requests()) == 2  # 75 + 25 objects
    order = run_order([write_integration(tmp_path, "b_events", body | {"kind": "events",
                                                                         "row_key": ["X"]}),
                       path])
    assert [p.stem for p in order] == ["touches", "b_events"]


def test_an_unknown_kind_is_refused_with_the_known_ones_named(tmp_path: Path) -> None:
    from engage_sync.config.files import parse_integration
    from engage_sync.errors import ConfigError

    with pytest.raises(ConfigError, match=r"unknown kind 'touches'.*attributes"):
        parse_integration({"kind": "touches", "source": {"table": "t"}}, file="t.yaml")
