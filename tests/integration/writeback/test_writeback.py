"""With `writeback`, every run's record and its rows' outcomes that were not a plain
success land in the user's warehouse (DuckDB and PostgreSQL): counts equal to the record, each
outcome joined to its source row by key, no payload value anywhere; a target that cannot be
written never fails the sync, and the next run writes what it missed."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import SyncError
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    integration_body,
    table_integration,
    write_integration,
)

MARK = "pv7q"
"""In every payload value (event names, properties, the rejected rows' text), in no key."""
SENT, REJECTED = 300, 5
COUNTS = ("rows_read", "rows_synced", "rows_failed_with_errors", "rows_rejected",
          "rows_in_doubt", "rows_possibly_duplicated", "errors_unmapped")


def _rows(first: int, n: int, rejects: int) -> list[dict[str, Any]]:
    """`n` events, then `rejects` rows whose payload is not JSON; one second apart."""
    at = T0 + timedelta(seconds=first)
    rows = [{"event_id": f"e{first + i:05d}", "updated_at": at + timedelta(seconds=i),
             "external_id": f"u{i % 40:03d}",
             "payload": json.dumps({"name": f"viewed_{MARK}",
                                    "properties": {"note": f"{MARK}-{first + i}"}})}
            for i in range(n)]
    return rows + [{"event_id": f"r{first + i:05d}", "updated_at": at + timedelta(seconds=n + i),
                    "external_id": f"u{i:03d}", "payload": f"{{not json {MARK}-{i}"}
                   for i in range(rejects)]


@pytest.fixture
def schema(warehouse: Warehouse) -> Iterator[str]:
    """A schema of the warehouse the write-back creates, dropped after the test."""
    name = f"wb_{uuid.uuid4().hex[:10]}"
    yield name
    warehouse.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _events(wh: Warehouse, service: Service, folder: Path, rows: list[dict[str, Any]],
            writeback: dict[str, Any]) -> Path:
    """Events in the service's format, keyed by default (EXTERNAL_ID, PAYLOAD: a digest)."""
    return table_integration(wh, service, folder, "events", rows, row_key=[], in_doubt="skip",
                             service={"retry_deadline_seconds": 0.5, "max_in_flight": 1},
                             writeback=writeback)


def _select(wh: Warehouse, sql: str, **params: Any) -> list[Any]:
    with wh.engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params).all())


def test_outcomes_equal_the_record_join_their_rows_and_hold_no_payload(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path, schema: str,
) -> None:
    path = _events(warehouse, service, tmp_path, _rows(0, SENT, REJECTED), {"schema": schema})
    runs, outcomes = f"{schema}.engage_sync_runs", f"{schema}.engage_sync_row_outcomes"
    service.faults([  # request 1 lands; 2 is processed, then 500 (in doubt, not resent);
        # 3 and 4 meet 503s until the retry deadline (failed)
        {"path": "/users/track", "action": "500", "nth": [2], "process": True},
        {"path": "/users/track", "action": "503", "nth": list(range(3, 400))}])
    result = sync_file(path, store=state)
    record = result.record
    assert record is not None and result.writeback_error is None
    failed = record["rows_failed_with_errors"] - record["rows_rejected"]
    assert record["rows_rejected"] == REJECTED
    assert record["rows_synced"] > 0 and record["rows_in_doubt"] > 0 and failed > 0, record

    (run,) = [r._mapping for r in _select(warehouse, f"SELECT * FROM {runs}")]
    assert run["run_id"] == record["run_id"] and run["job_status"] == record["job_status"]
    assert {k: run[k] for k in COUNTS} == {k: record[k] for k in COUNTS}
    counts = dict(_select(warehouse, f"SELECT outcome, count(*) FROM {outcomes} "
                                     "WHERE run_id = :r GROUP BY outcome", r=record["run_id"]))
    assert counts == {"rejected": REJECTED, "failed": failed,
                      "in_doubt": record["rows_in_doubt"]}
    # each outcome is one source row, found by its key: external_id and md5 of the payload
    lonely = _select(warehouse, f"SELECT count(*) FROM {outcomes} o WHERE NOT EXISTS ("
                     "SELECT 1 FROM events_sync s WHERE s.external_id = o.external_id "
                     "AND md5(CAST(s.payload AS VARCHAR)) = o.payload)")
    assert lonely == [(0,)]
    assert set(_select(warehouse, f"SELECT DISTINCT outcome, tries, retry_state FROM {outcomes}"
                                  " WHERE outcome <> 'rejected'")) == {
        ("failed", 1, "pending"), ("in_doubt", None, None)}
    values = [str(v) for table in (runs, outcomes)
              for row in _select(warehouse, f"SELECT * FROM {table}") for v in row]
    assert len(values) > 1000 and not [v for v in values if MARK in v]


def test_a_row_in_doubt_and_sent_again_is_one_outcome_row(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path, schema: str,
) -> None:
    """Under `resend`, a request answered 500 after processing on every try until the retry
    deadline ends in doubt, and its rows were sent more than once: the record counts them in
    doubt and possibly doubled; the write-back writes each once, in doubt, its reason saying
    it may be doubled."""
    path = table_integration(warehouse, service, tmp_path, "events", _rows(0, 150, 0),
                             row_key=[], in_doubt="resend",
                             service={"retry_deadline_seconds": 1.0, "max_in_flight": 1},
                             writeback={"schema": schema})
    outcomes = f"{schema}.engage_sync_row_outcomes"
    service.faults([{"path": "/users/track", "action": "500", "nth": list(range(2, 400)),
                     "process": True}])
    result = sync_file(path, store=state)
    record = result.record
    assert record is not None and result.writeback_error is None
    in_doubt, doubled = record["rows_in_doubt"], record["rows_possibly_duplicated"]
    assert in_doubt > 0 and doubled >= in_doubt, record  # rows both in doubt and doubled

    rows = _select(warehouse, f"SELECT external_id, payload, outcome, reason FROM {outcomes} "
                              "WHERE run_id = :r", r=record["run_id"])
    named = state.errors("events", limit=10_000)
    assert len(rows) == len({e["row_key"] for e in named}) < len(named)
    assert len({(r.external_id, r.payload) for r in rows}) == len(rows)  # one per row
    counts = Counter(r.outcome for r in rows)
    assert counts == Counter({"in_doubt": in_doubt, "possibly_duplicated": doubled - in_doubt})
    assert all("may be doubled" in r.reason for r in rows)


def test_a_target_that_cannot_be_written_fails_no_sync_and_the_next_run_writes_it(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = _events(warehouse, service, tmp_path, _rows(0, 20, 2), {})
    warehouse.execute("CREATE VIEW engage_sync_runs AS SELECT 1 AS x")  # not writable
    first = sync_file(path, store=state)
    assert first.record is not None and first.record["rows_rejected"] == 2
    assert first.writeback_error is not None
    pending = state.writeback_state(first.record["run_id"])
    assert pending is not None and pending["state"] == "pending" and pending["error"]

    warehouse.execute("DROP VIEW engage_sync_runs")
    warehouse.insert("events_sync", _rows(100, 10, 1))
    second = sync_file(path, store=state)
    assert second.record is not None and second.writeback_error is None
    written = _select(warehouse, "SELECT run_id, rows_rejected FROM engage_sync_runs "
                                 "ORDER BY seq")
    assert written == [(first.record["run_id"], 2), (second.record["run_id"], 1)]
    outcomes = sorted([(first.record["run_id"], 2), (second.record["run_id"], 1)])
    assert sorted(_select(warehouse, "SELECT run_id, count(*) FROM engage_sync_row_outcomes "
                                     "GROUP BY run_id")) == outcomes

    state.mark_writeback_pending(first.record["run_id"], "events", "written, but not marked")
    sync_file(path, store=state)  # writes the first run again: still once
    assert sorted(_select(warehouse, "SELECT run_id, count(*) FROM engage_sync_row_outcomes "
                                     "GROUP BY run_id")) == outcomes
    assert len(_select(warehouse, "SELECT run_id FROM engage_sync_runs")) == 3


def test_a_run_that_fails_is_written_back_too(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _events(warehouse, service, tmp_path, _rows(0, 10, 1), {})
    monkeypatch.setenv("ENGAGE_API_KEY", "not-the-key")  # 401 to the key check: stopped
    with pytest.raises(SyncError):  # before reading, in error
        sync_file(path, store=state)
    (run,) = state.runs_newest_first("events", 0, 5)
    assert _select(warehouse, "SELECT run_id, job_status, rows_rejected FROM "
                              "engage_sync_runs") == [(run["run_id"], "error", 0)]


def test_a_partitioned_run_is_written_once_with_its_partitions_outcomes(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = _events(warehouse, service, tmp_path, _rows(0, 200, 6), {})
    warehouse.engine.dispose()  # DuckDB: the partitions' threads open the file
    record = sync_file(path, options=RunOptions(partitions=2), store=state).record
    assert record is not None and record["rows_rejected"] == 6
    assert len(state.partition_runs(record["run_id"])) == 2
    assert _select(warehouse, "SELECT run_id, rows_read, rows_rejected FROM "
                              "engage_sync_runs") == [(record["run_id"], 206, 6)]
    assert _select(warehouse, "SELECT run_id, outcome, count(*) FROM engage_sync_row_outcomes "
                              "GROUP BY run_id, outcome") == [(record["run_id"], "rejected", 6)]


def test_the_outcome_table_is_there_from_a_clean_first_run_typed_as_the_source_keys(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    warehouse.create("orders_sync", [("order_id", sa.BigInteger()), ("updated_at", sa.DateTime()),
                                     ("external_id", sa.String()), ("payload", sa.Text())])
    rows = [{**row, "order_id": 1000 + n} for n, row in enumerate(_rows(0, 5, 0))]
    warehouse.insert("orders_sync", [{k: r[k] for k in ("order_id", "updated_at", "external_id",
                                                         "payload")} for r in rows])
    path = write_integration(tmp_path, "orders", integration_body(
        warehouse, service, "events", "orders_sync", row_key=["ORDER_ID"], writeback={}))
    assert sync_file(path, store=state).record["rows_synced"] == 5  # type: ignore[index]
    assert _select(warehouse, "SELECT count(*) FROM engage_sync_row_outcomes") == [(0,)]
    with warehouse.engine.connect() as conn:
        kinds = {c["name"]: c["type"] for c in
                 sa.inspect(conn).get_columns("engage_sync_row_outcomes")}
    assert isinstance(kinds["order_id"], sa.Integer)  # from the cursor's key values

    late = _rows(100, 0, 1)[0]
    warehouse.insert("orders_sync", [{"order_id": 7, **{k: late[k] for k in (
        "updated_at", "external_id", "payload")}}])
    sync_file(path, store=state)
    assert _select(warehouse, "SELECT s.order_id FROM engage_sync_row_outcomes o "
                              "JOIN orders_sync s USING (order_id)") == [(7,)]


def test_a_writeback_url_names_another_database(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WRITEBACK_FILE", str(tmp_path / "opsdb.duckdb"))
    path = _events(warehouse, service, tmp_path, _rows(0, 5, 2),
                   {"url": "duckdb:///${WRITEBACK_FILE}", "schema": "ops"})
    result = sync_file(path, store=state)
    record = result.record
    assert record is not None and result.writeback_error is None, result.writeback_error
    ops = sa.create_engine(f"duckdb:///{tmp_path / 'opsdb.duckdb'}")
    with ops.connect() as conn:
        assert conn.execute(sa.text("SELECT run_id FROM ops.engage_sync_runs")).all() == [
            (record["run_id"],)]
        assert conn.execute(sa.text(  # named as the source spells them
            "SELECT count(external_id), count(payload) FROM ops.engage_sync_row_outcomes")
        ).all() == [(2, 2)]
    ops.dispose()
