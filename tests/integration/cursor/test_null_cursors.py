"""Rows with a NULL UPDATED_AT are counted in every run's record and warned
about once per run, or read as the oldest rows with `null_cursor: oldest`; on DuckDB and
PostgreSQL. And an older state database gains the record's new column."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, Warehouse, table_integration, user_rows


def _rows() -> list[dict[str, Any]]:
    nulls = [{"updated_at": None, "external_id": f"n{k}", "payload": '{"plan": "x"}'}
             for k in range(2)]
    return [*user_rows(5), *nulls]


def _sync(path: Path, state: StateStore) -> dict[str, Any]:
    record = sync_file(path, store=state).record
    assert record is not None
    return record


def test_null_cursors_are_counted_and_warned_about_in_every_run(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", _rows())
    caplog.set_level(logging.WARNING, "engage_sync")
    first = _sync(path, state)
    assert (first["rows_read"], first["rows_skipped_null_cursor"]) == (5, 2), first
    warnings = [r.getMessage() for r in caplog.records if "NULL UPDATED_AT" in r.getMessage()]
    assert len(warnings) == 1 and "2 rows" in warnings[0]
    second = _sync(path, state)
    assert (second["rows_read"], second["rows_skipped_null_cursor"]) == (0, 2), second
    assert service.profile("n0") is None


def test_null_cursor_oldest_reads_them_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", _rows(),
                             null_cursor="oldest")
    first = _sync(path, state)
    assert (first["rows_read"], first["rows_synced"], first["rows_skipped_null_cursor"]) \
        == (7, 7, 0), first
    assert service.profile("n1") is not None
    assert _sync(path, state)["rows_read"] == 0


def test_an_older_state_database_gains_the_new_count_column(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    store = open_state(url)
    with store.engine.begin() as conn:  # as a state database made before the column existed
        conn.exec_driver_sql("ALTER TABLE engage_runs DROP COLUMN rows_skipped_null_cursor")
    run_id = store.open_run("old", "incremental", None, None)
    reopened = open_state(url)
    columns = {c["name"] for c in sa.inspect(reopened.engine).get_columns("engage_runs")}
    assert "rows_skipped_null_cursor" in columns
    assert reopened.run(run_id)["rows_skipped_null_cursor"] == 0
