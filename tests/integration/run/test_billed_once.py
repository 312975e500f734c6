"""Nothing billed twice, counted at the sandbox: backfills, full resyncs and a
newly mapped column go through the field diff; `send_whole` sends whole when asked; and a
changed source schema stops a run before it sends anything (the schema guard)."""

from __future__ import annotations

import gc
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.gc_tuning import GEN0
from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions, run_options
from engage_sync.errors import SchemaChanged
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    event_rows,
    kill_during_request,
    resume_cli,
    table_integration,
    write_integration,
)
from tests.integration.duckdb_reads import count_reads

ROWS = 120


def _points(service: Service) -> int:
    return int(service.counters()["data_points"])


def _run(path: Path, state: StateStore, mode: str = "incremental", *,
         start: datetime | None = None, end: datetime | None = None,
         send_whole: bool = False) -> dict[str, Any]:
    options = run_options(mode, start, end, False, False,  # type: ignore[arg-type]
                          send_whole=send_whole)
    record = sync_file(path, store=state, options=options).record
    assert record is not None
    return record


def _members(wh: Warehouse, svc: Service, folder: Path, attributes: dict[str, str],
             create: bool = True) -> Path:
    """A table of mapped columns (PLAN, TIER: every third row NULL), one row a minute."""
    if create:
        wh.create("members", [("updated_at", sa.DateTime()), ("user_id", sa.String()),
                              ("plan", sa.String()), ("tier", sa.String())])
        wh.insert("members", [
            {"updated_at": T0 + timedelta(minutes=i), "user_id": f"m{i:04d}",
             "plan": "free" if i % 2 else "pro", "tier": None if i % 3 == 0 else f"t{i % 5}"}
            for i in range(ROWS)])
    return write_integration(folder, "members", {
        "kind": "attributes", "warehouse": {"url": wh.url}, "source": {"table": "members"},
        "mapping": {"identifier": {"external_id": "USER_ID"}, "attributes": attributes},
        "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60}})


def test_a_backfill_of_a_synced_range_bills_nothing_unless_sent_whole(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = _members(warehouse, service, tmp_path, {"PLAN": "plan", "TIER": "tier"})
    first = _run(path, state)
    billed = _points(service)
    assert first["data_points_sent"] == billed == ROWS * 2  # a first run sends whole

    day = {"start": T0, "end": T0 + timedelta(days=1)}
    again = _run(path, state, "backfill", **day)
    assert _points(service) == billed
    assert (again["rows_read"], again["rows_unchanged"], again["data_points_sent"]) == (
        ROWS, ROWS, 0)
    resync = _run(path, state, "full_resync")
    assert _points(service) == billed and resync["data_points_saved"] == billed

    whole = _run(path, state, "backfill", **day, send_whole=True)
    assert whole["data_points_sent"] == ROWS * 2  # NULLs too: the object as read
    assert _points(service) == billed + ROWS * 2


def test_a_newly_mapped_column_bills_one_point_per_non_null_row(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    _run(_members(warehouse, service, tmp_path, {"PLAN": "plan"}), state)
    assert _points(service) == ROWS
    widened = _members(warehouse, service, tmp_path, {"PLAN": "plan", "TIER": "tier"},
                       create=False)
    resync = _run(widened, state, "full_resync")
    non_null = sum(1 for i in range(ROWS) if i % 3)
    assert _points(service) == ROWS + non_null
    assert resync["data_points_sent"] == non_null
    assert service.counters()["data_points_by_key"]["attributes"]["tier"] == non_null


# --- the schema guard -------------------------------------------------------------------------


def _guarded(path: Path, state: StateStore, accept: bool = False) -> dict[str, Any]:
    options = run_options("incremental", None, None, False, False,  # type: ignore[arg-type]
                          accept_schema=accept)
    record = sync_file(path, store=state, options=options).record
    assert record is not None
    return record


def test_a_mapped_column_whose_type_changed_stops_the_run_before_any_request(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = _members(warehouse, service, tmp_path, {"PLAN": "plan", "TIER": "tier"})
    _run(path, state)
    warehouse.execute("ALTER TABLE members ADD COLUMN note VARCHAR")
    warehouse.execute("UPDATE members SET updated_at = updated_at + INTERVAL '1 day'")
    warehouse.execute("ALTER TABLE members ALTER COLUMN plan TYPE INTEGER USING "
                      "CASE WHEN plan = 'pro' THEN 1 ELSE 0 END")
    requests = len(service.requests())
    for _ in range(2):  # refused again until accepted: the new schema is not recorded
        with pytest.raises(SchemaChanged, match=r"column plan was VARCHAR, is now INTEGER"):
            _guarded(path, state)
    assert len(service.requests()) == requests
    last = state.runs_newest_first("members", 0, 1)[0]
    assert last["job_status"] == "config_error" and "--accept-schema" in last["message"]

    accepted = _guarded(path, state, accept=True)
    assert accepted["job_status"] == "success" and accepted["rows_read"] == ROWS
    assert service.profile("m0000")["attributes"]["plan"] == 1  # type: ignore[index]
    assert _guarded(path, state)["job_status"] == "success"  # the new schema is the record's


def test_a_payload_key_whose_json_type_changed_stops_the_run(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    rows = [{"updated_at": T0 + timedelta(seconds=i), "external_id": f"u{i}",
             "payload": json.dumps({"age": 30 + i, "plan": "free"})} for i in range(20)]
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    _run(path, state)
    warehouse.execute("UPDATE users_sync SET updated_at = updated_at + INTERVAL '1 hour', "
                      "payload = :p", p=json.dumps({"age": "thirty", "plan": "free"}))
    requests = len(service.requests())
    with pytest.raises(SchemaChanged, match="payload key 'age' was number, is now string"):
        _guarded(path, state)
    assert len(service.requests()) == requests
    assert _guarded(path, state, accept=True)["rows_synced"] == 20


# --- one object per user per run --------------------------------------------------------------


def _changes(wh: Warehouse, users: int, twice: int) -> list[dict[str, Any]]:
    """`users` users, one row each; the first `twice` of them again later with new values."""
    rows = [{"updated_at": T0 + timedelta(seconds=i), "user_id": f"s{i:05d}", "plan": "free",
             "tier": "t1"} for i in range(users)]
    rows += [{"updated_at": T0 + timedelta(hours=1, seconds=i), "user_id": f"s{i:05d}",
              "plan": "pro", "tier": "t2"} for i in range(twice)]
    wh.create("changes", [("updated_at", sa.DateTime()), ("user_id", sa.String()),
                          ("plan", sa.String()), ("tier", sa.String())])
    wh.insert("changes", rows)
    return rows


def _changes_file(wh: Warehouse, svc: Service, folder: Path, **extra: Any) -> Path:
    return write_integration(folder, "changes", {
        "kind": "attributes", "warehouse": {"url": wh.url}, "source": {"table": "changes"},
        "mapping": {"identifier": {"external_id": "USER_ID"},
                    "attributes": {"PLAN": "plan", "TIER": "tier"}},
        "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60}, **extra})


def test_a_user_with_several_rows_in_a_run_is_sent_once_with_the_latest_values(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    _sent_once(warehouse, service, state, tmp_path)


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_duckdb_window_read_in_slices_sends_each_user_once_too(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same, the window read in slices of 500 rows (`read/duckdb_later.py`): the 1,000
    superseded rows lie in the first slices, their users' later rows in the last ones."""
    queries = count_reads(monkeypatch, 500)
    _sent_once(warehouse, service, state, tmp_path)
    assert len(queries) >= 2 * 8  # the dry run's read and the run's, each in 8 slices or more


def _sent_once(warehouse: Warehouse, service: Service, state: StateStore,
               tmp_path: Path) -> None:
    _changes(warehouse, 3000, 1000)
    path = _changes_file(warehouse, service, tmp_path)
    dry = sync_file(path, store=state, options=RunOptions(dry_run=True)).dry_run
    assert dry is not None
    assert {k: dry.summary("changes")[k] for k in (
        "rows", "rows_unchanged", "data_points_sent", "data_points_saved")} == {
        "rows": 3000, "rows_unchanged": 1000, "data_points_sent": 6000,
        "data_points_saved": 2000}
    first = _run(path, state)
    assert _points(service) == 6000  # not 8,000: 1,000 superseded rows bought nothing
    assert (first["rows_read"], first["rows_synced"], first["rows_unchanged"]) == (
        4000, 3000, 1000)
    assert first["data_points_sent"] == 6000 and first["data_points_saved"] == 2000
    assert service.profile("s00007")["attributes"] == {  # type: ignore[index]
        "plan": "pro", "tier": "t2"}
    assert service.profile("s02500")["attributes"] == {  # type: ignore[index]
        "plan": "free", "tier": "t1"}


def test_superseded_rows_send_sends_every_row_in_order(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    _changes(warehouse, 300, 100)
    _run(_changes_file(warehouse, service, tmp_path, superseded_rows="send"), state)
    assert _points(service) == 800
    assert service.profile("s00007")["attributes"]["plan"] == "pro"  # type: ignore[index]


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)  # a kill: one is enough
def test_killed_after_passing_a_superseded_row_the_resumed_run_sends_the_latest(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
) -> None:
    """Rows passed as superseded are behind the progress a kill leaves; the resumed run reads
    only what follows, where each such user's later row is its last: sent, never passed."""
    rows = _changes(warehouse, 3000, 3000)
    path = _changes_file(warehouse, service, tmp_path, extract_batch_rows=500)
    warehouse.engine.dispose()  # DuckDB: one process at a time may open the file
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    # every first row is superseded (3,000 passed, no request), so request 10 carries later
    # rows: the kill comes after the progress moved over superseded rows
    kill_during_request(path, service, sandbox_key, state_url, nth=10)
    resume_cli(path, state_url, sandbox_key)
    latest = {r["user_id"]: {"plan": r["plan"], "tier": r["tier"]} for r in rows}
    profiles = service.profiles()
    assert len(profiles) == 3000
    assert all(p["attributes"] == latest[p["external_id"]] for p in profiles)


# --- the dry run's bill -----------------------------------------------------------------------


def _predicted_then_billed(path: Path, state: StateStore, service: Service) -> tuple[int, int]:
    """The dry run's data points, then what the sandbox billed for the same run."""
    dry = sync_file(path, store=state, options=RunOptions(dry_run=True)).dry_run
    assert dry is not None
    before = _points(service)
    _run(path, state)
    return dry.summary(path.stem)["data_points_sent"], _points(service) - before


def test_the_dry_run_predicts_the_bill_of_attributes_events_and_purchases(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    _changes(warehouse, 600, 200)  # superseded rows and a first run sent whole
    changes = _changes_file(warehouse, service, tmp_path)
    predicted, billed = _predicted_then_billed(changes, state, service)
    assert predicted == billed == 1200
    warehouse.execute("UPDATE changes SET updated_at = updated_at + INTERVAL '1 day', "
                      "tier = 't9' WHERE user_id < 's00050'")  # diffed: one point each
    assert _predicted_then_billed(changes, state, service) == (50, 50)

    events = table_integration(warehouse, service, tmp_path, "events",
                               event_rows(340, step=timedelta(seconds=1)))
    assert _predicted_then_billed(events, state, service) == (340, 340)

    warehouse.create("orders", [("order_id", sa.String()), ("customer_id", sa.String()),
                                ("sku", sa.String()), ("currency", sa.String()),
                                ("amount", sa.Float()), ("updated_at", sa.DateTime())])
    warehouse.insert("orders", [
        {"order_id": f"o{i}", "customer_id": f"c{i % 7}", "sku": f"s{i % 3}",
         "currency": "USD" if i % 10 else "dollars", "amount": 10.5 + i,
         "updated_at": T0 + timedelta(minutes=i)}
        for i in range(120)])  # every tenth row rejected (not a currency code): not billed
    orders = write_integration(tmp_path, "orders", {
        "kind": "purchases", "warehouse": {"url": warehouse.url},
        "source": {"table": "orders"}, "row_key": ["ORDER_ID"],
        "mapping": {"identifier": {"external_id": "CUSTOMER_ID"}, "purchase": {
            "product_id": "SKU", "currency": "CURRENCY", "price": "AMOUNT"}},
        "service": {"base_url": service.base_url}})
    predicted, billed = _predicted_then_billed(orders, state, service)
    assert predicted == billed == 108


def test_a_sync_tunes_the_garbage_collector_for_its_process(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ENGAGE_SYNC_TUNE_GC=on, `sync_file` raises the collector's young threshold
    (`gc_tuning`): the transform's per-row containers no longer trigger a collection every
    700 allocations."""
    monkeypatch.setenv("ENGAGE_SYNC_TUNE_GC", "on")
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        _run(_members(warehouse, service, tmp_path, {"PLAN": "plan"}), state)
        assert gc.get_threshold() == (GEN0, 10, 10)
    finally:
        gc.set_threshold(*before)
