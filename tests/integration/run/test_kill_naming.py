"""With `in_doubt: skip`, a run killed while sending, resumed, killed again
within seconds, then let finish: every event that did not reach the service is named in the
errors, and the record's in-doubt count is exactly the rows named."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

from engage_sync.adapters.wiring import open_state
from tests.integration.conftest import (
    Service,
    Warehouse,
    event_rows,
    kill_during_request,
    resume_cli,
    table_integration,
)

ROWS = 1500


def test_events_in_flight_at_two_quick_kills_are_all_named(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    # one extract batch holds every row: before the fix, rows in flight at the first kill
    # were named only at the end of the resumed run's batch, which the second kill never saw
    path = table_integration(warehouse, service, tmp_path, "events",
                             event_rows(ROWS, users=60, step=timedelta(milliseconds=100)),
                             in_doubt="skip", service={"max_in_flight": 1})
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, sandbox_key, state_url, nth=4)
    # the resume marks request 4 in doubt, sends two more, and is killed on the third
    kill_during_request(path, service, sandbox_key, state_url,
                        nth=len(service.requests()) + 3)
    record = resume_cli(path, state_url, sandbox_key)

    arrived = Counter(service.event_ids())
    assert max(arrived.values()) == 1  # skip: never twice
    named = [e["row_key"] for e in open_state(state_url).errors("events", limit=10_000)
             if e["kind"] == "in_doubt"]
    missing = {f"e{i:06d}" for i in range(ROWS)} - set(arrived)
    assert len(missing) == 150  # the two requests in flight at the kills
    assert sorted(named) == sorted(missing)
    assert record["rows_in_doubt"] == len(named)
    assert record["rows_read"] == ROWS
