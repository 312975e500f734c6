"""A backfill of events finds the rows incremental runs did not send, row by row: an event
written late into a stretch an incremental run already sent (below the incremental cursor, so
no incremental run reads it) is sent by the backfill, and nothing the incremental runs sent
is sent again."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, timedelta
from pathlib import Path

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, Warehouse, event_rows, table_integration


def test_a_backfill_sends_an_event_written_late_into_a_sent_stretch(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events",
                             event_rows(300, step=timedelta(seconds=1)))
    first = sync_file(path, store=state).record  # every event, in 4 requests
    assert first is not None and first["rows_synced"] == 300
    late_at = T0 + timedelta(seconds=50, milliseconds=500)  # inside the first request's stretch
    warehouse.insert("events_sync", [{
        "event_id": "late1", "updated_at": late_at, "external_id": "u00001",
        "payload": json.dumps({"name": "viewed", "properties": {"eid": "late1"}})}])
    again = sync_file(path, store=state).record
    assert again is not None and again["rows_read"] == 0  # below the cursor: never read

    backfill = sync_file(path, store=state, options=RunOptions(
        mode="backfill", start=T0.replace(tzinfo=UTC),
        end=(T0 + timedelta(seconds=300)).replace(tzinfo=UTC))).record
    assert backfill is not None
    assert (backfill["rows_read"], backfill["rows_synced"]) == (1, 1), backfill
    ids = Counter(service.event_ids())
    assert ids["late1"] == 1 and len(ids) == 301 and max(ids.values()) == 1
