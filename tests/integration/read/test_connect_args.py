"""`warehouse.connect_args` reaches the driver's connect() with its `${VAR}` references
expanded (a live PostgreSQL warehouse whose table is found only through the search_path the
connect_args set), and no value of it reaches an error, a log or the run's record."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.errors import ConfigError, SyncError
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    integration_body,
    user_rows,
    users_table,
    write_integration,
)

SECRET = "pw-7f3a9c-never-shown"


@pytest.mark.parametrize("reader", ["auto", "sqlalchemy"])  # ADBC connects on its own
@pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
def test_connect_args_reach_the_driver_with_their_references_expanded(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, reader: str) -> None:
    users_table(warehouse)
    warehouse.insert("users_sync", user_rows(150, step=timedelta(seconds=1)))
    base, schema = warehouse.url.split("?options=-csearch_path%3D")
    monkeypatch.setenv("WH_SCHEMA", schema)
    body = integration_body(warehouse, service, "attributes", "users_sync")
    body["warehouse"] = {"url": base, "reader": reader,  # the table is in `schema` only
                         "connect_args": {"options": "-csearch_path=${WH_SCHEMA}",
                                          "application_name": "engage-sync"}}
    record = sync_file(write_integration(tmp_path, "users", body), store=state).record
    assert record is not None
    assert (record["rows_read"], record["rows_synced"]) == (150, 150)
    assert service.counters()["attributes_processed"] == 150


@pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
def test_no_value_of_connect_args_is_shown(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    base = warehouse.url.split("?")[0]
    unreachable = base.rsplit("@", 1)[0] + "@127.0.0.1:1/" + base.rsplit("/", 1)[1]
    body = integration_body(warehouse, service, "attributes", "users_sync")
    body["warehouse"] = {"url": unreachable, "connect_args": {"password": "${WH_PASSWORD}",
                                                              "connect_timeout": 2}}
    path = write_integration(tmp_path, "users", body)
    with pytest.raises(ConfigError) as missing:  # the variable not set: its key is named
        sync_file(path, store=state)
    assert "warehouse.connect_args.password" in str(missing.value)
    monkeypatch.setenv("WH_PASSWORD", SECRET)
    with caplog.at_level(logging.DEBUG), pytest.raises(SyncError) as failed:
        sync_file(path, store=state)
    shown = [str(failed.value), caplog.text, *(str(r) for r in state.runs_newest_first(
        "users", 0, 10))]
    assert not any(SECRET in text for text in shown)
    assert "check the host and port" in str(failed.value)  # the fix is named
