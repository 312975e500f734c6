"""Faults of the answer: between the pipeline and the sandbox, a loopback proxy answers one
request 200 with an HTML page, 502 with a gateway's page (before or after forwarding it), 503
in the service's own shape, cuts a body short or stalls it.

Events under `in_doubt: skip`, one request in flight: an answer that does not prove the
request was refused before processing leaves its rows in doubt (named, never sent again), a
502 included, which a gateway gives after forwarding as readily as before; the service's own
503 is retried. Nothing is sent twice, the record adds up, and one warning line names the
service, what it answered and what becomes of the rows. Under `resend` a 502 is retried, and
its rows are named as possibly duplicated."""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from tests.integration.answer_proxy import AnswerProxy
from tests.integration.conftest import Service, Warehouse, event_rows, table_integration

ROWS, BATCH = 300, 75
ALL = {f"e{i:06d}" for i in range(ROWS)}
SECOND = {f"e{i:06d}" for i in range(BATCH, 2 * BATCH)}  # the rows of request 2


def _run(warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
         action: str, caplog: pytest.LogCaptureFixture, in_doubt: str = "skip",
         ) -> tuple[dict[str, int], float]:
    """Sync 300 events through the proxy, request 2 spoiled by `action`; the record and the
    run's seconds."""
    with AnswerProxy(service.base_url, "/users/track", {2: action}).running() as proxy:
        path = table_integration(
            warehouse, Service(proxy.url, service.control), tmp_path, "events",
            event_rows(ROWS, users=60, step=timedelta(milliseconds=500)), in_doubt=in_doubt,
            service={"max_in_flight": 1, "timeout_seconds": 1.5})
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="engage_sync"):
            record = sync_file(path, store=state).record
        assert proxy.spoiled == [(2, action)]
    assert record is not None
    return record, time.monotonic() - started


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
            and r.name.startswith("engage_sync")]


def _assert_in_doubt(record: dict[str, int], service: Service, state: StateStore,
                     processed: bool = True) -> None:
    """Request 2's answer does not say whether it was processed: its rows are in doubt, named,
    and not sent again; every other row synced once. `processed`: whether the sandbox in
    fact processed request 2 (then its events arrived once, else never)."""
    assert record["rows_read"] == ROWS
    assert record["rows_synced"] == ROWS - BATCH and record["rows_in_doubt"] == BATCH
    assert record["rows_failed_with_errors"] == 0 and record["job_status"] == "partial"
    assert record["rows_possibly_duplicated"] == 0
    ids = Counter(service.event_ids())
    assert set(ids) == (ALL if processed else ALL - SECOND)
    assert max(ids.values()) == 1  # never sent again
    errors = state.errors("events", limit=1000)
    assert {e["row_key"] for e in errors if e["kind"] == "in_doubt"} == SECOND
    assert not [e for e in errors if e["kind"] == "duplicate"]


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_200_that_is_not_json_leaves_its_rows_in_doubt(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record, _ = _run(warehouse, service, state, tmp_path, "not_json", caplog)
    _assert_in_doubt(record, service, state)
    [line] = _warnings(caplog)
    assert "the service at http://127.0.0.1:" in line
    assert "200 answer that is not the service's JSON" in line
    assert "not sent again (in_doubt: skip)" in line and "engage-sync errors events" in line


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_502_after_forwarding_leaves_its_rows_in_doubt_and_each_event_arrives_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record, _ = _run(warehouse, service, state, tmp_path, "forwarded_502", caplog)
    _assert_in_doubt(record, service, state)
    [line] = _warnings(caplog)
    assert "the service at http://127.0.0.1:" in line
    assert "502 bad gateway (may have been processed) (an HTML page, not the service's" in line
    assert "not sent again (in_doubt: skip)" in line and "engage-sync errors events" in line


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_502_before_forwarding_is_in_doubt_too_and_never_sent_again(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing tells a gateway's 502 before forwarding from one after: at most once keeps
    both in doubt, and these events never arrive (named, for a user to decide)."""
    record, _ = _run(warehouse, service, state, tmp_path, "html_502", caplog)
    _assert_in_doubt(record, service, state, processed=False)
    [line] = _warnings(caplog)
    assert "not sent again (in_doubt: skip)" in line


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_502_after_forwarding_under_resend_is_sent_again_and_named_possibly_duplicated(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record, _ = _run(warehouse, service, state, tmp_path, "forwarded_502", caplog, "resend")
    assert record["rows_read"] == record["rows_synced"] == ROWS
    assert record["rows_in_doubt"] == 0 and record["job_status"] == "success"
    assert record["rows_possibly_duplicated"] == BATCH
    ids = Counter(service.event_ids())
    assert set(ids) == ALL
    assert {k for k, n in ids.items() if n == 2} == SECOND  # at least once: arrived twice
    named = {e["row_key"] for e in state.errors("events", limit=1000)
             if e["kind"] == "duplicate"}
    assert named == SECOND
    [line] = _warnings(caplog)
    assert "502 bad gateway (may have been processed)" in line and "retrying in" in line


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_the_services_own_503_is_retried_and_every_event_lands_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record, _ = _run(warehouse, service, state, tmp_path, "busy_503", caplog)
    assert record["rows_read"] == record["rows_synced"] == ROWS
    assert record["rows_in_doubt"] == 0 and record["job_status"] == "success"
    ids = Counter(service.event_ids())
    assert set(ids) == ALL and max(ids.values()) == 1
    [line] = _warnings(caplog)
    assert "the service at http://127.0.0.1:" in line
    assert "503 service unavailable: Service Unavailable" in line and "retrying in" in line


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_body_cut_short_leaves_its_rows_in_doubt(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record, _ = _run(warehouse, service, state, tmp_path, "cut", caplog)
    _assert_in_doubt(record, service, state)
    [line] = _warnings(caplog)
    assert "the service at http://127.0.0.1:" in line and "RemoteProtocolError" in line
    assert "not sent again (in_doubt: skip)" in line


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_an_answer_that_stalls_ends_by_the_read_timeout_in_doubt(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record, _ = _run(warehouse, service, state, tmp_path, "stall", caplog)
    _assert_in_doubt(record, service, state)
    [line] = _warnings(caplog)
    # the read timeout ended it: the proxy, holding the answer 120 s, would end it with the
    # body cut short (RemoteProtocolError)
    assert "the service at http://127.0.0.1:" in line and "ReadTimeout" in line
    assert "no answer within service.timeout_seconds" in line
    assert "not sent again (in_doubt: skip)" in line
