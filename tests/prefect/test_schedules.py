"""Scheduled runs: the Prefect server's scheduler creates runs of a served deployment on its
interval schedule, and the served process completes them and records their status. Triggering
by hand (as the other tests do) never touches the scheduler, so this is the only guard of the
server stack's versions (SQLAlchemy 2.1 breaks Prefect 3.8's scheduler: see pyproject.toml)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
from prefect.client.schemas.objects import FlowRun

from engage_sandbox.web.server import SandboxHandle
from engage_sync.adapters.wiring import open_state
from tests.prefect.conftest import USERS, _stop, build_folder, start_serve, wait_for_deployments

NAME = "ticking_users"  # a name of its own: other modules serve engage-sync/users


def scheduled_runs(name: str) -> list[FlowRun]:
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[name])))
    return [r for r in runs if r.auto_scheduled]


def wait_for_completed(name: str, count: int, timeout: float) -> list[FlowRun]:
    """The completed scheduled runs, once there are `count` of them (fails after timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = scheduled_runs(name)
        done = [r for r in runs if r.state is not None and r.state.is_completed()]
        if len(done) >= count:
            return done
        if time.monotonic() > deadline:
            states = sorted(str(r.state.type.value if r.state else None) for r in runs)
            pytest.fail(f"{len(done)} of {count} scheduled runs completed in {timeout} s; "
                        f"scheduled runs seen: {states} (is the server's scheduler failing?)")
        time.sleep(1)


def test_an_interval_schedule_creates_runs_that_complete_and_record_status(
    prefect_api: str, sandbox: SandboxHandle, tmp_path: Path
) -> None:
    folder = build_folder(tmp_path, sandbox.base_url)
    (folder / "users.yaml").rename(folder / f"{NAME}.yaml")
    (folder / "events.yaml").unlink()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    log = tmp_path / "serve.log"
    proc = start_serve(folder, state_url, prefect_api, sandbox.api_key, log,
                       "--interval", "3s", "--limit", "1")
    try:
        wait_for_deployments(proc, log, f"engage-sync/{NAME}")
        done = wait_for_completed(NAME, 2, timeout=60)
    finally:
        _stop(proc)
    records = open_state(state_url).runs_newest_first(NAME, 0, 10)
    assert len(records) >= len(done)  # every completed scheduled run recorded its status
    assert {r["job_status"] for r in records} <= {"partial", "success"}
    assert sum(r["rows_synced"] for r in records) == USERS  # the first run synced them all
