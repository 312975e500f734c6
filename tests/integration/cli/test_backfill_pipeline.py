"""Backfill runs at the pipeline level: ranges, chunks, the bulk header, the cursor, events."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, timedelta
from pathlib import Path

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    event_rows,
    table_integration,
    user_rows,
)


def _backfill(start_s: int, end_s: int, **kw: bool) -> RunOptions:
    return RunOptions(mode="backfill", start=T0 + timedelta(seconds=start_s),
                      end=T0 + timedelta(seconds=end_s), **kw)


def test_adjacent_backfill_chunks_send_each_attribute_row_once_and_keep_the_cursor(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes",
                             user_rows(120, step=timedelta(seconds=1)))
    sync_file(path, store=state)
    cursor = state.cursor("users")
    before = len(service.requests())

    # sent whole (a diffed backfill of synced rows sends nothing: test_billed_once.py)
    first = sync_file(path, store=state, options=_backfill(0, 60, send_whole=True)).record
    second = sync_file(path, store=state, options=_backfill(60, 120, send_whole=True)).record
    assert first is not None and second is not None
    assert (first["rows_synced"], second["rows_synced"]) == (60, 60)  # row at 60 s: once
    assert first["mode"] == "backfill"
    assert state.cursor("users") == cursor
    backfill_requests = service.requests()[before:]
    assert backfill_requests and all(
        r["headers"].get("x-braze-bulk") == "true" for r in backfill_requests)
    sent = Counter(a["external_id"] for r in backfill_requests for a in r["body"]["attributes"])
    assert len(sent) == 120 and max(sent.values()) == 1


def test_backfill_of_events_never_resends_what_incremental_runs_sent(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events",
                             event_rows(300, step=timedelta(seconds=1)))
    midway = (T0 + timedelta(seconds=150)).replace(tzinfo=UTC)
    first = sync_file(path, store=state, clock=lambda: midway).record  # events 0..150
    assert first is not None and first["rows_synced"] == 151
    cursor = state.cursor("events")

    backfill = sync_file(path, store=state, options=_backfill(0, 300)).record
    assert backfill is not None and backfill["rows_read"] == 0
    assert state.cursor("events") == cursor
    sync_file(path, store=state)  # the incremental sync sends the rest
    ids = Counter(service.event_ids())
    assert len(ids) == 300 and max(ids.values()) == 1

    resent = sync_file(path, store=state,
                       options=_backfill(0, 100, resend_events=True)).record
    assert resent is not None and resent["rows_synced"] == 100
    ids = Counter(service.event_ids())
    assert {k for k, v in ids.items() if v == 2} == {f"e{i:06d}" for i in range(100)}
