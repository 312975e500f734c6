"""Faults: the sandbox answers 429 and 5xx by script, drops connections after processing, and
a run is killed with SIGKILL in the middle, or stopped with SIGTERM. Nothing is lost; the
in-doubt policy is obeyed."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest

from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.state.store import StateStore
from tests.integration.answer_proxy import AnswerProxy
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    _wait_for_request,
    event_rows,
    kill_during_request,
    resume_cli,
    run_cli,
    table_integration,
    user_rows,
)

BATCH = 75


def _events_setup(wh: Warehouse, service: Service, tmp_path: Path, policy: str,
                  n: int = 600, in_flight: int = 1, **settings: Any) -> Path:
    return table_integration(wh, service, tmp_path, "events",
                             event_rows(n, users=60, step=timedelta(milliseconds=500)),
                             in_doubt=policy, service={"max_in_flight": in_flight, **settings})


def _batch_ids(k: int) -> set[str]:
    """Event ids of the k-th request (1-based) when rows are sent in order, 75 a request."""
    return {f"e{i:06d}" for i in range((k - 1) * BATCH, k * BATCH)}


def test_scripted_429_and_5xx_with_skip_policy(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _events_setup(warehouse, service, tmp_path, "skip")
    # HTTP request numbers: 1 ok (batch 1); 2: 429, 3: the service's 503 (known not
    # processed, retried); 4: 502, which a gateway may give after forwarding -> batch 2 in
    # doubt, not re-sent (the sandbox had not processed it); 5: 500 unprocessed -> batch 3 in
    # doubt, not re-sent; 6 ok (batch 4); 7: processed then dropped -> batch 5 in doubt, not
    # re-sent; 8.. ok.
    service.faults([
        {"path": "/users/track", "action": "429", "nth": [2]},
        {"path": "/users/track", "action": "503", "nth": [3]},
        {"path": "/users/track", "action": "502", "nth": [4]},
        {"path": "/users/track", "action": "500", "nth": [5]},
        {"path": "/users/track", "action": "drop", "nth": [7]},
    ])
    record = sync_file(path, store=state).record
    assert record is not None
    assert record["rows_read"] == 600
    assert record["rows_in_doubt"] == 3 * BATCH
    assert record["rows_synced"] == 600 - 3 * BATCH
    assert record["job_status"] == "partial"
    ids = Counter(service.event_ids())
    assert max(ids.values()) == 1  # at most once: nothing sent twice
    assert (_batch_ids(2) | _batch_ids(3)).isdisjoint(ids)  # unprocessed, in doubt, not re-sent
    assert _batch_ids(5) <= set(ids)  # the dropped batch had been processed
    assert len(ids) == 600 - 2 * BATCH
    in_doubt = [e for e in state.errors("events", limit=1000) if e["kind"] == "in_doubt"]
    assert len(in_doubt) == 3 * BATCH


def test_scripted_5xx_and_drop_with_resend_policy(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _events_setup(warehouse, service, tmp_path, "resend")
    # 2: 500 unprocessed -> re-sent as 3 (ok); 5: processed then dropped -> re-sent as 6.
    service.faults([
        {"path": "/users/track", "action": "500", "nth": [2]},
        {"path": "/users/track", "action": "504", "nth": [4], "process": True},
        {"path": "/users/track", "action": "drop", "nth": [6]},
    ])
    record = sync_file(path, store=state).record
    assert record is not None
    assert record["rows_synced"] == 600 and record["rows_in_doubt"] == 0
    ids = Counter(service.event_ids())
    assert set(ids) == {f"e{i:06d}" for i in range(600)}  # nothing lost: at least once
    twice = {k for k, v in ids.items() if v == 2}
    # request 4 (batch 3) and request 6 (batch 4) were processed before the in-doubt answer
    assert twice == _batch_ids(3) | _batch_ids(4)


def test_sigkill_mid_run_then_resume_sends_every_event_exactly_once(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = _events_setup(warehouse, service, tmp_path, "resend")
    warehouse.engine.dispose()  # DuckDB: one process at a time may open the file
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, sandbox_key, state_url, nth=4)
    assert len(set(service.event_ids())) == 3 * BATCH  # requests 1-3 landed before the kill

    record = resume_cli(path, state_url, sandbox_key)
    assert record["rows_read"] == record["rows_synced"] == 600
    assert record["rows_in_doubt"] == 0
    ids = Counter(service.event_ids())
    assert set(ids) == {f"e{i:06d}" for i in range(600)}
    assert max(ids.values()) == 1


def test_sigkill_with_skip_policy_counts_the_request_in_flight_as_in_doubt(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = _events_setup(warehouse, service, tmp_path, "skip")
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, sandbox_key, state_url, nth=4)

    record = resume_cli(path, state_url, sandbox_key)
    assert record["rows_read"] == 600
    assert record["rows_in_doubt"] == BATCH  # at most once: the request in flight at the kill
    ids = Counter(service.event_ids())
    assert max(ids.values()) == 1
    assert set(ids) == {f"e{i:06d}" for i in range(600)} - _batch_ids(4)
    named = {e["row_key"] for e in open_state(state_url).errors("events", limit=1000)
             if e["kind"] == "in_doubt"}
    assert named == _batch_ids(4)  # the rows in doubt are named, not only counted


def test_sigkill_mid_run_then_resume_leaves_every_attribute_at_its_final_value(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = table_integration(
        warehouse, service, tmp_path, "attributes",
        user_rows(400, at=T0, plan="old") + user_rows(400, at=T0 + timedelta(seconds=1),
                                                      plan="new"),
        extract_batch_rows=100, superseded_rows="send")  # every row sent, each counted once
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, sandbox_key, state_url, nth=5)
    assert resume_cli(path, state_url, sandbox_key)["rows_read"] == 800
    plans = {p["external_id"]: p["attributes"]["plan"] for p in service.profiles()}
    assert len(plans) == 400 and set(plans.values()) == {"new"}


# --- SIGTERM: an orchestrator's graceful stop ------------------------------------------------

STOP_BOUND = 30 + 5  # seconds: service.timeout_seconds (default) + 5, README "SIGTERM"
WATCHDOG = "not stopped"  # the line of a run the watchdog ended after that grace


def _sigterm(path: Path, key: str, state_url: str, wait_for: Callable[[Popen[bytes]], None]
             ) -> tuple[int, str]:
    """Start the run as its own process, SIGTERM it once `wait_for` returns; its exit code and
    stderr (the watchdog ends it within STOP_BOUND at most: the deadline is generous)."""
    proc = run_cli(path, state_url, key)
    wait_for(proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=STOP_BOUND + 120)
    return proc.returncode, err.decode()


def _stopped_resumable(code: int, err: str, state_url: str) -> None:
    """Exit 143 with one line, the run's own within its grace (the watchdog, armed at the
    signal for service.timeout_seconds + 5, never ended it); the run left `running`, its lease
    released."""
    assert code == 143, err
    assert WATCHDOG not in err, err
    [line] = [x for x in err.splitlines() if "stopped by SIGTERM" in x]
    assert "resumable and the next run of the integration resumes it" in line
    [run] = open_state(state_url).runs_newest_first("events", 0, 10)
    assert run["job_status"] == "running" and run["message"] in line
    assert run["lease_until"].replace(tzinfo=UTC) <= datetime.now(UTC)


def _resumed_exactly_once(path: Path, service: Service, key: str, state_url: str) -> None:
    record = resume_cli(path, state_url, key)
    assert record["rows_read"] == record["rows_synced"] == 300
    assert record["rows_in_doubt"] == 0 and record["job_status"] == "success"
    ids = Counter(service.event_ids())
    assert set(ids) == {f"e{i:06d}" for i in range(300)} and max(ids.values()) == 1


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_sigterm_settles_the_request_in_flight_and_the_next_run_resumes(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = _events_setup(warehouse, service, tmp_path, "skip", n=300)
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    # the sandbox holds request 3 for 2 s, then processes and answers it
    service.faults([{"path": "/users/track", "action": "delay", "nth": [3],
                     "delay_seconds": 2}])
    code, err = _sigterm(path, sandbox_key, state_url, lambda proc: _wait_for_request(
        service, 3, proc, "/users/track"))
    _stopped_resumable(code, err, state_url)
    service.faults([])
    assert len(service.requests()) == 3  # none after the signal
    assert len(set(service.event_ids())) == 3 * BATCH  # the one in flight was answered
    _resumed_exactly_once(path, service, sandbox_key, state_url)  # and settled: not in doubt


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_sigterm_during_a_retry_wait_stops_at_once_and_the_request_is_sent_by_the_next_run(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    with AnswerProxy(service.base_url, "/users/track", {3: "retry_later"}).running() as proxy:
        # a grace (timeout_seconds + 5) shorter than the 30 s Retry-After: a wait not cut
        # short by the signal would be ended by the watchdog, with its line
        path = _events_setup(warehouse, Service(proxy.url, service.control), tmp_path, "skip",
                             n=300, timeout_seconds=10)
        warehouse.engine.dispose()
        state_url = f"sqlite:///{tmp_path / 'state.db'}"

        def waiting(proc: Popen[bytes]) -> None:  # request 3 answered 503, Retry-After: 30
            while not proxy.spoiled:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.3)

        deadline = time.monotonic() + 120
        code, err = _sigterm(path, sandbox_key, state_url, waiting)
        _stopped_resumable(code, err, state_url)  # the 30 s wait was cut short by the signal
        assert proxy.counts["/users/track"] == 3  # and no attempt followed it
        assert len(set(service.event_ids())) == 2 * BATCH
        _resumed_exactly_once(path, service, sandbox_key, state_url)  # request 3: not in doubt
