"""A NULL row key never reaches an ordering or a comparison (Python or
SQL), and rejected rows that share a position are each counted and named; on DuckDB and
PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from engage_sync.status.record import run_errors
from tests.integration.conftest import T0, Service, Warehouse, table_integration, user_rows


def _sync(path: Path, state: StateStore) -> dict[str, Any]:
    record = sync_file(path, store=state).record
    assert record is not None
    return record


def _row(external_id: str | None, at: Any = T0, payload: str = '{"plan": "pro"}'
         ) -> dict[str, Any]:
    return {"updated_at": at, "external_id": external_id, "payload": payload}


def test_a_null_key_among_rows_of_one_time_ends_the_run_cleanly(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    """80 rows and one with a NULL EXTERNAL_ID at one UPDATED_AT: the run ends cleanly, its
    journal compacted after the record is written `partial` (where a NULL key must not crash it)."""
    path = table_integration(warehouse, service, tmp_path, "attributes",
                             [*user_rows(80), _row(None)])
    record = _sync(path, state)
    assert (record["job_status"], record["rows_read"], record["rows_synced"],
            record["rows_rejected"]) == ("partial", 81, 80, 1), record
    (error,) = run_errors(state, record["run_id"])
    assert "EXTERNAL_ID" in error["reason"]
    assert len(service.profiles()) >= 80


def test_a_cursor_ending_in_a_null_key_keeps_later_rows_of_its_time(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    """The last row of the first run has a NULL identifier, so the stored cursor ends in a
    NULL; rows written later at the same UPDATED_AT (and after it) are read by the next run:
    in SQL, `EXTERNAL_ID > NULL` would have selected none of them."""
    last = T0 + timedelta(seconds=1)
    path = table_integration(warehouse, service, tmp_path, "attributes",
                             [*user_rows(10), _row(None, last)])
    first = _sync(path, state)
    assert (first["rows_read"], first["rows_synced"], first["rows_rejected"]) == (11, 10, 1)
    assert state.cursor("users") is not None
    warehouse.insert("users_sync", [_row("late", last), _row("next", last + timedelta(1))])
    second = _sync(path, state)
    assert (second["rows_read"], second["rows_synced"], second["rows_rejected"]) == (2, 2, 0)
    late = service.profile("late")
    assert late is not None and service.profile("next") is not None


def test_rejected_rows_at_one_position_are_each_counted_and_named(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    """Rejected rows sharing a position: 3 rows with a NULL EXTERNAL_ID and 2 rows keyed `dup`
    with bad JSON, all at one UPDATED_AT; then a good row. Each of the 6 rows is counted once,
    and over the runs the counts add up to the rows in the table."""
    rows = [_row(None) for _ in range(3)] + [_row("dup", payload="{bad") for _ in range(2)]
    rows.append(_row("good", T0 + timedelta(seconds=1)))
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    record = _sync(path, state)
    assert (record["rows_read"], record["rows_synced"], record["rows_rejected"]) == (6, 1, 5)
    listing = run_errors(state, record["run_id"])
    assert len(listing) == 5
    assert [e["row_key"] for e in listing].count("dup") == 2
    again = _sync(path, state)  # nothing new: nothing read, nothing counted twice
    assert again["rows_read"] == 0, again
    assert sum(r["rows_read"] for r in (record, again)) == len(rows)
    for r in (record, again):
        assert r["rows_read"] == r["rows_synced"] + r["rows_failed_with_errors"] \
            + r["rows_in_doubt"], r
