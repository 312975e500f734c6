"""Under `in_doubt: resend`, rows of requests sent again after an answer
the service may have processed (5xx, dropped connection) or after a kill are counted in the
record (`rows_possibly_duplicated`) and named in the errors; every doubled event is among
them."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    event_rows,
    kill_during_request,
    resume_cli,
    table_integration,
)

BATCH = 75


def _setup(wh: Warehouse, service: Service, tmp_path: Path) -> Path:
    return table_integration(wh, service, tmp_path, "events",
                             event_rows(600, users=60, step=timedelta(milliseconds=500)),
                             in_doubt="resend", service={"max_in_flight": 1})


def _batch_ids(k: int) -> set[str]:
    return {f"e{i:06d}" for i in range((k - 1) * BATCH, k * BATCH)}


def _named(state: StateStore) -> list[str]:
    return [e["row_key"] for e in state.errors("events", limit=10_000)
            if e["kind"] == "duplicate"]


def test_resends_after_doubtful_answers_are_counted_and_named(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _setup(warehouse, service, tmp_path)
    # request 2 (batch 2): 500, unprocessed; 4 (batch 3): 504 after processing; 6 (batch 4):
    # processed, then the connection dropped. Each is sent again; the client cannot tell
    # which were processed, so all three batches may be doubled.
    service.faults([
        {"path": "/users/track", "action": "500", "nth": [2]},
        {"path": "/users/track", "action": "504", "nth": [4], "process": True},
        {"path": "/users/track", "action": "drop", "nth": [6]},
    ])
    record = sync_file(path, store=state).record
    assert record is not None and record["rows_synced"] == 600
    twice = {k for k, v in Counter(service.event_ids()).items() if v > 1}
    named = _named(state)
    assert twice == _batch_ids(3) | _batch_ids(4)
    assert set(named) == _batch_ids(2) | twice and len(named) == len(set(named))
    assert record["rows_possibly_duplicated"] == 3 * BATCH


def test_requests_in_flight_at_a_kill_and_sent_again_are_named(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = _setup(warehouse, service, tmp_path)
    warehouse.engine.dispose()  # DuckDB: one process at a time may open the file
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, sandbox_key, state_url, nth=4)
    record = resume_cli(path, state_url, sandbox_key)
    assert record["rows_synced"] == 600
    assert set(_named(open_state(state_url))) == _batch_ids(4)
    assert record["rows_possibly_duplicated"] == BATCH
