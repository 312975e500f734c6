"""A running run's record shows its counts so far (`run/running_counts.py`): read through the
status server's `job_sync_status` while the sandbox holds one of the run's requests, it is
`running` with the rows of the requests settled before; at the end it has the run's counts."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from engage_sync.adapters.status_server import create_app
from engage_sync.adapters.wiring import open_state, sync_file
from tests.integration.conftest import (
    Service,
    Warehouse,
    event_rows,
    served,
    table_integration,
)

TOKEN = "test-token-0123456789abcdef"
HELD = 5  # the request the sandbox holds


def test_a_running_runs_record_shows_the_rows_settled_so_far(
    warehouse: Warehouse, service: Service, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(600),
                             service={"max_in_flight": 1})
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    service.faults([{"path": "/users/track", "action": "delay", "nth": [HELD],
                     "delay_seconds": 5}])
    ended: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: ended.update(sync_file(path, store=store).record
                                                          or {}))
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while len(service.requests()) < HELD:  # the held request has arrived
            assert runner.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        with served(create_app(store, TOKEN, tmp_path), TOKEN) as client:
            response = client.get("/cdi/integrations/events/job_sync_status")
        assert response.status_code == 200
        mid = response.json()["results"][0]
    finally:
        runner.join(120)
    assert mid["job_status"] == "running" and mid["sync_finish_time"] is None
    assert 0 < mid["rows_synced"] <= (HELD - 1) * 75  # at most the requests answered before
    assert ended["rows_synced"] == 600
