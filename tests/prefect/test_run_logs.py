"""engage-sync's own log lines reach the flow run's logs on the Prefect server (where a team
reads a run in the UI), from whichever thread logged them: a retried request's warning comes
from a sending thread (sent in the context of the thread that read its rows), a line of a
thread with no run context at all goes to the oldest open run. What is shipped is what the
process logs (the logger's level decides); one handler however many runs are open, gone after
the last."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engage_sandbox.web.server import SandboxHandle
from engage_sync.adapters.flows import sync_integration
from engage_sync.adapters.run_logs import shipped
from tests.integration.conftest import Service


def _logs(api: str, flow_run_id: str) -> list[dict[str, object]]:
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    body = httpx.post(f"{api}/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200}, timeout=30)
    body.raise_for_status()
    return list(body.json())


@pytest.fixture
def engage_logger() -> Iterator[logging.Logger]:
    """The `engage_sync` logger, its level and handlers put back after the test."""
    logger = logging.getLogger("engage_sync")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    assert logger.handlers == handlers  # nothing left behind


@pytest.mark.parametrize(("level", "shipped_lines"), [(logging.WARNING, 1), (logging.ERROR, 0)])
def test_a_retry_warning_from_a_sending_thread_is_in_the_flow_runs_logs(
        prefect_api: str, sandbox: SandboxHandle, tmp_path: Path, users_yaml: Path,
        engage_logger: logging.Logger, level: int, shipped_lines: int) -> None:
    engage_logger.setLevel(level)
    with httpx.Client(base_url=sandbox.control_url, timeout=30) as control:
        service = Service(sandbox.base_url, control)
        service.faults([{"path": "/users/track", "action": "500", "nth": [1]}])
        try:
            state = asyncio.run(sync_integration(
                str(users_yaml), state_url=f"sqlite:///{tmp_path / 'state.db'}",
                return_state=True))
        finally:
            service.faults([])
    assert state.is_completed(), state.message
    logs = _logs(prefect_api, str(state.state_details.flow_run_id))
    retried = [g for g in logs if "retrying in" in str(g["message"])]
    assert len(retried) == shipped_lines, [g["message"] for g in logs]
    for line in retried:
        assert line["level"] == logging.WARNING
        assert str(line["name"]).startswith("engage_sync.")
        assert "POST /users/track: 500" in str(line["message"])
    assert engage_logger.level == level


def test_one_handler_while_runs_are_open_and_none_outside_a_run(
        prefect_api: str, engage_logger: logging.Logger) -> None:
    from prefect import flow

    before = len(engage_logger.handlers)

    @flow
    def probe() -> tuple[int, int, int]:
        with shipped():
            outer = len(engage_logger.handlers)
            with shipped():  # a second run open in the same process
                inner = len(engage_logger.handlers)
            return outer, inner, len(engage_logger.handlers)

    with shipped():  # no flow run here: nothing to ship to
        assert len(engage_logger.handlers) == before
    assert probe() == (before + 1, before + 1, before + 1)
    assert len(engage_logger.handlers) == before


def test_a_duckdb_file_waited_for_says_so_in_the_flow_runs_logs(
        prefect_api: str, tmp_path: Path, users_yaml: Path,
        engage_logger: logging.Logger) -> None:
    """At INFO (an expected wait): shipped where the process logs INFO, as `engage-sync run`
    does by default."""
    from tests.integration.read.test_duckdb_turns import holder

    engage_logger.setLevel(logging.INFO)
    proc = holder(tmp_path / "warehouse.duckdb", 2)  # another process has the file for 2 s
    try:
        state = asyncio.run(sync_integration(
            str(users_yaml), state_url=f"sqlite:///{tmp_path / 'state.db'}", return_state=True))
    finally:
        proc.kill()
        proc.wait(30)
    assert state.is_completed(), state.message
    said = [(g["level"], str(g["message"]))
            for g in _logs(prefect_api, str(state.state_details.flow_run_id))]
    assert [level for level, m in said if m.startswith(
        "the DuckDB file is held by another process; waiting up to 300 s")] == [logging.INFO], said


def test_a_line_from_a_thread_without_a_run_goes_to_the_oldest_open_run(
        prefect_api: str, engage_logger: logging.Logger) -> None:
    """A run's threads that carry no run context (the lease's heartbeat, the field helper's
    writer) ship to the oldest run open in the process: the flow run, not a task run opened
    inside it (partitions on Prefect's thread pool)."""
    from prefect import flow, task
    from prefect.context import get_run_context

    marker = f"a bare thread's line {time.monotonic_ns()}"

    def bare() -> None:
        thread = threading.Thread(
            target=lambda: logging.getLogger("engage_sync.probe").warning(marker))
        thread.start()
        thread.join()

    @task
    def partition() -> None:
        with shipped():
            bare()

    @flow
    def probe() -> str:
        with shipped():
            partition()
        return str(get_run_context().flow_run.id)  # type: ignore[union-attr]

    flow_run_id = probe()
    lines = [g for g in _logs(prefect_api, flow_run_id) if g["message"] == marker]
    assert len(lines) == 1 and lines[0]["task_run_id"] is None, lines
