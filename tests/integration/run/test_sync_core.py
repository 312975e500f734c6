"""The core sync against real DuckDB and PostgreSQL, talking HTTP to the sandbox on loopback."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore
from engage_sync.status.record import page
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    event_rows,
    integration_body,
    table_integration,
    user_rows,
    users_table,
    write_integration,
)


def _accounted(record: dict[str, int]) -> int:
    return (record["rows_synced"] + record["rows_rejected"] + record["rows_in_doubt"]
            + record["rows_failed_with_errors"] - record["rows_rejected"])


def test_every_row_read_is_accounted_for(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    users_table(warehouse)
    rows = user_rows(300, step=timedelta(seconds=1))
    rows += [
        {"updated_at": T0, "external_id": "bad-json", "payload": '{"plan": '},
        {"updated_at": T0, "external_id": None, "payload": '{"plan": "x"}'},
        {"updated_at": T0, "external_id": "not-object", "payload": "[1, 2]"},
    ]
    warehouse.insert("users_sync", rows)
    path = write_integration(tmp_path, "users", integration_body(
        warehouse, service, "attributes", "users_sync"))

    record = sync_file(path, store=state).record
    assert record is not None
    assert record["rows_read"] == len(rows) == _accounted(record)
    assert record["rows_synced"] == 300
    assert record["rows_rejected"] == 3
    assert record["rows_failed_with_errors"] == 3
    assert record["job_status"] == "partial"
    assert service.counters()["attributes_processed"] == 300
    assert service.profile("u00299")["attributes"]["plan"] == "free"  # type: ignore[index]
    reasons = {e["row_key"]: e["reason"] for e in state.errors("users")}
    assert set(reasons) == {"bad-json", "", "not-object"}
    # requests are full: ceil(300 / 75)
    assert len(service.requests()) == 4


def test_rows_sharing_a_timestamp_across_batch_boundaries_are_sent_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes",
                             user_rows(260), name="same_ts",  # all at T0
                             extract_batch_rows=100)

    first = sync_file(path, store=state).record
    assert first is not None and first["rows_synced"] == 260
    second = sync_file(path, store=state).record
    assert second is not None and second["rows_read"] == 0
    assert service.counters()["attributes_processed"] == 260
    sent = [a["external_id"] for r in service.requests() for a in r["body"]["attributes"]]
    assert Counter(sent).most_common(1)[0][1] == 1 and len(sent) == 260


def test_event_rows_sharing_a_timestamp_are_each_sent_exactly_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(230),
                             extract_batch_rows=100)
    sync_file(path, store=state)
    warehouse.insert("events_sync", [
        {**r, "event_id": f"late{i}", "payload": json.dumps(
            {"name": "viewed", "properties": {"eid": f"late{i}"}}),
         "updated_at": T0 + timedelta(seconds=1)} for i, r in enumerate(event_rows(5))])
    sync_file(path, store=state)
    ids = service.event_ids()
    assert len(ids) == 235 and len(set(ids)) == 235


def test_a_row_stamped_in_the_future_waits_for_its_time(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    users_table(warehouse)
    warehouse.insert("users_sync", user_rows(10, at=T0))
    future = now.replace(tzinfo=None) + timedelta(hours=1)
    warehouse.insert("users_sync", [
        {"updated_at": future, "external_id": "future", "payload": '{"plan": "later"}'}])
    path = write_integration(tmp_path, "future", integration_body(
        warehouse, service, "attributes", "users_sync", settle_lag="1m"))

    first = sync_file(path, store=state, clock=lambda: now).record
    assert first is not None and first["rows_synced"] == 10
    assert service.profile("future") is None
    # a row written late, below the future row, is not skipped
    warehouse.insert("users_sync", [{"updated_at": now.replace(tzinfo=None) - timedelta(
        hours=2), "external_id": "late", "payload": '{"plan": "late"}'}])
    second = sync_file(path, store=state, clock=lambda: now + timedelta(minutes=5)).record
    assert second is not None and second["rows_synced"] == 1
    assert service.profile("late") is not None and service.profile("future") is None
    third = sync_file(path, store=state, clock=lambda: now + timedelta(hours=2)).record
    assert third is not None and third["rows_synced"] == 1
    assert service.profile("future")["attributes"]["plan"] == "later"  # type: ignore[index]
    fourth = sync_file(path, store=state, clock=lambda: now + timedelta(hours=3)).record
    assert fourth is not None and fourth["rows_read"] == 0


def test_mapped_purchases_from_a_query(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    import sqlalchemy as sa

    warehouse.create("orders", [("order_id", sa.String()), ("customer_id", sa.String()),
                                ("sku", sa.String()), ("currency", sa.String()),
                                ("amount", sa.Float()), ("qty", sa.Integer()),
                                ("updated_at", sa.DateTime())])
    warehouse.insert("orders", [
        {"order_id": f"o{i}", "customer_id": f"c{i % 7}", "sku": f"s{i % 3}",
         "currency": "EUR" if i else "euros", "amount": 10.5 + i, "qty": 1 + i % 2,
         "updated_at": T0 + timedelta(minutes=i)} for i in range(90)])
    body = integration_body(warehouse, service, "purchases", "orders")
    body["source"] = {"query": "SELECT * FROM orders WHERE qty > 0"}
    body["row_key"] = ["ORDER_ID"]
    body["mapping"] = {"identifier": {"external_id": "CUSTOMER_ID"}, "purchase": {
        "product_id": "SKU", "currency": "CURRENCY", "price": "AMOUNT", "quantity": "QTY"}}
    path = write_integration(tmp_path, "orders", body)
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["rows_synced"], record["rows_rejected"]) == (89, 1)
    assert service.counters()["purchases"] == 89
    assert [e["row_key"] for e in state.errors("orders")] == ["o0"]


def test_a_bad_file_is_refused_and_recorded_as_config_error(
    state: StateStore, tmp_path: Path
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: attributes\nsource: {table: t}\nsettle_lag: soon\n")
    with pytest.raises(ConfigError, match=r"broken.yaml.*settle_lag"):
        sync_file(path, store=state)
    records = page(state, "broken", None).results
    assert records[0]["job_status"] == "config_error"
    assert "settle_lag" in records[0]["message"]


def test_dry_run_sends_nothing_and_moves_no_cursor(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", [*user_rows(100), {
        "updated_at": T0, "external_id": None, "payload": "{}"}], name="dry")
    result = sync_file(path, store=state, options=RunOptions(dry_run=True)).dry_run
    assert result is not None
    assert (result.rows, result.requests, len(result.rejects)) == (101, 2, 1)
    assert service.requests() == [] and state.cursor("dry") is None


def test_a_late_row_inside_lookback_is_sent_and_nothing_else_is_resent(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events",
                             event_rows(150, step=timedelta(seconds=10)), lookback="1h")
    first = sync_file(path, store=state).record
    assert first is not None and first["rows_synced"] == 150
    cursor_after_first = state.cursor("events")

    # a row arrives late, stamped inside the lookback period and below the cursor
    late = event_rows(1)[0] | {"event_id": "late", "updated_at": T0 + timedelta(seconds=95),
                               "payload": json.dumps({"name": "viewed",
                                                      "properties": {"eid": "late"}})}
    # and one arrives too late: older than the lookback period
    too_late = late | {"event_id": "too-late", "updated_at": T0 - timedelta(hours=3),
                       "payload": json.dumps({"name": "viewed",
                                              "properties": {"eid": "too-late"}})}
    warehouse.insert("events_sync", [late, too_late])
    second = sync_file(path, store=state).record
    assert second is not None
    assert (second["rows_read"], second["rows_synced"]) == (1, 1)
    ids = Counter(service.event_ids())
    assert ids["late"] == 1 and "too-late" not in ids
    assert max(ids.values()) == 1 and len(ids) == 151
    assert state.cursor("events") == cursor_after_first  # never moved backwards

    third = sync_file(path, store=state).record
    assert third is not None and third["rows_read"] == 0


def test_a_sqlite_warehouse_syncs_with_the_same_guarantees(
    service: Service, state: StateStore, tmp_path: Path
) -> None:
    """SQLite keeps timestamps as text: the cursor, the signpost and the compound order still
    hold (rows sharing a timestamp across batches go once; a second run sends nothing)."""
    import sqlalchemy as sa

    from tests.integration.conftest import Warehouse

    url = f"sqlite:///{tmp_path / 'warehouse.sqlite'}"
    wh = Warehouse("sqlite", url, sa.create_engine(url))
    users_table(wh)
    wh.insert("users_sync", user_rows(180) + user_rows(
        40, at=T0 + timedelta(seconds=1), prefix="v"))
    wh.insert("users_sync", [{"updated_at": T0, "external_id": None, "payload": "{}"}])
    path = write_integration(tmp_path, "lite", integration_body(
        wh, service, "attributes", "users_sync", extract_batch_rows=100))
    first = sync_file(path, store=state).record
    assert first is not None
    assert (first["rows_read"], first["rows_synced"], first["rows_rejected"]) == (221, 220, 1)
    second = sync_file(path, store=state).record
    assert second is not None and second["rows_read"] == 0
    assert service.counters()["attributes_processed"] == 220
    wh.engine.dispose()
