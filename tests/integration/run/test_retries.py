"""Failed rows are sent again by later runs, whatever their cursor: a 503 storm
longer than the retry deadline leaves rows failed; the next run, with the service healthy,
sends them first without any UPDATED_AT changing, billed once; after `failed_row_tries`
sends they are parked and named."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from engage_sync.adapters.wiring import sync_file
from engage_sync.cli.main import main
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    event_rows,
    table_integration,
    user_rows,
)

ROWS = 160
STORM = [{"path": "/users/track", "action": "503"}]


def _run(path: Path, state: StateStore) -> dict[str, Any]:
    record = sync_file(path, store=state).record
    assert record is not None
    return record


def _users(wh: Warehouse, service: Service, folder: Path, **extra: Any) -> Path:
    return table_integration(wh, service, folder, "attributes",
                             user_rows(ROWS, step=timedelta(seconds=1)),
                             service={"retry_deadline_seconds": 0.5}, **extra)


def test_rows_failed_in_a_503_storm_are_sent_by_the_next_run_and_billed_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = _users(warehouse, service, tmp_path)
    service.faults(STORM)
    stormy = _run(path, state)
    assert (stormy["rows_failed_with_errors"], stormy["rows_synced"]) == (ROWS, 0)
    assert service.counters()["data_points"] == 0  # a 503 is not processed
    cursor = state.cursor("users")

    service.faults([])
    healed = _run(path, state)  # nothing moved: only the retry pass reads these rows
    assert healed["rows_read"] == 0 and healed["job_status"] == "success"
    retried = [r for r in state.runs_newest_first("users", 0, 10) if r["mode"] == "retry"]
    assert sum(r["rows_synced"] for r in retried) == ROWS
    assert all(r["job_status"] == "success" for r in retried)
    assert service.counters()["data_points"] == ROWS * 2  # plan and n, once each
    assert service.profile("u00007")["attributes"]["n"] == 7  # type: ignore[index]
    assert state.cursor("users") == cursor  # a retry never moves the cursor

    requests = len(service.requests())
    again = _run(path, state)  # landed: never sent again
    assert len(service.requests()) == requests and again["rows_read"] == 0


def test_a_request_failing_on_every_run_is_parked_after_its_tries_and_named(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    capsys: Any,
) -> None:
    path = _users(warehouse, service, tmp_path, failed_row_tries=5)
    service.faults(STORM)
    sends = []
    for _ in range(6):
        before = len(service.requests())
        _run(path, state)
        sends.append(len(service.requests()) > before)
    assert sends == [True] * 5 + [False]  # the first send and 4 retries, then parked
    assert state.pending_retries("users") == []

    assert main(["errors", str(path), "--state-url", str(state.engine.url),
                 "--limit", "1000"]) == 0
    listing = capsys.readouterr().out
    parked = [line for line in listing.splitlines() if "parked after 5 tries" in line]
    assert len(parked) == ROWS and "503" in parked[0]


def test_events_failed_under_skip_are_sent_once_and_in_doubt_ones_never(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    """Under `skip` a request in doubt is never sent again, by a retry neither; a request the
    service refused whole (failed) is: those events arrive exactly once."""
    path = table_integration(warehouse, service, tmp_path, "events",
                             event_rows(150, step=timedelta(seconds=1)), in_doubt="skip",
                             service={"retry_deadline_seconds": 0.5, "max_in_flight": 1})
    # request 1: 500 after processing is unknown -> in doubt; request 2 and its retries: 503
    service.faults([{"path": "/users/track", "action": "500", "nth": [1]},
                    {"path": "/users/track", "action": "503", "nth": list(range(2, 40))}])
    first = _run(path, state)
    assert first["rows_in_doubt"] == 75 and first["rows_failed_with_errors"] == 75
    service.faults([])
    _run(path, state)
    ids = Counter(service.event_ids())
    assert max(ids.values()) == 1 and len(ids) == 75  # the failed half, once
