"""engage-sync's own log lines reach the flow run's logs on the Prefect server (where a team
reads a run in the UI), from whichever thread logged them: a retried request's warning comes
from a sending thread, which has no Prefect run context of its own. Nothing is shipped after
the run, and the logger is left as it was."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from engage_sandbox.server import SandboxHandle
from engage_sync.adapters.flows import sync_integration
from engage_sync.adapters.run_logs import shipped
from tests.prefect.conftest import build_folder


def _logs(api: str, flow_run_id: str) -> list[dict[str, object]]:
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    body = httpx.post(f"{api}/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200}, timeout=30)
    body.raise_for_status()
    return list(body.json())


def test_a_retry_warning_from_a_sending_thread_is_in_the_flow_runs_logs(
        prefect_api: str, sandbox: SandboxHandle, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox.reset()
    monkeypatch.setenv("ENGAGE_API_KEY", sandbox.api_key)
    httpx.post(f"{sandbox.control_url}/faults", json=[
        {"path": "/users/track", "action": "500", "nth": [1]}], timeout=30).raise_for_status()
    path = build_folder(tmp_path, sandbox.base_url) / "users.yaml"
    try:
        state = sync_integration(str(path), state_url=f"sqlite:///{tmp_path / 'state.db'}",
                                 return_state=True)
    finally:
        httpx.post(f"{sandbox.control_url}/faults", json=[], timeout=30)
    assert state.is_completed(), state.message
    logs = _logs(prefect_api, str(state.state_details.flow_run_id))
    retried = [g for g in logs if "retrying in" in str(g["message"])]
    assert len(retried) == 1, [g["message"] for g in logs]
    assert retried[0]["level"] == logging.WARNING
    assert str(retried[0]["name"]).startswith("engage_sync.")
    assert "POST /users/track: 500" in str(retried[0]["message"])
    assert not [h for h in logging.getLogger("engage_sync").handlers
                if type(h).__name__ == "APILogHandler"]  # removed after the run


def test_open_only_in_a_flow_run_and_the_logger_left_as_it_was(prefect_api: str) -> None:
    from prefect import flow

    logger = logging.getLogger("engage_sync")
    before = logger.level, list(logger.handlers)
    logger.setLevel(logging.WARNING)

    @flow
    def probe() -> tuple[int, int]:
        with shipped():
            return logger.level, len(logger.handlers)

    try:
        with shipped():  # no flow run here: nothing to ship to
            assert logger.handlers == before[1] and logger.level == logging.WARNING
        assert probe() == (logging.INFO, len(before[1]) + 1)
        assert logger.level == logging.WARNING and logger.handlers == before[1]
    finally:
        logger.setLevel(before[0])
