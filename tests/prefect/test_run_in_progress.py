"""A run that finds its integration's run of the same mode still going in another process (a
schedule's tick during a long first load) opens no warehouse (a DuckDB file that run holds is
not waited for) and sends nothing, and is no failure: the flow run ends Completed, named
"Skipped", saying which run holds it; `engage-sync run` (under
Prefect or not) says the same in one line and exits 75 (EX_TEMPFAIL: try again later)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from engage_sandbox.web.server import SandboxHandle
from engage_sync.adapters.flows import sync_integration
from engage_sync.adapters.wiring import open_state
from tests.integration.conftest import ELSEWHERE, Service, held_run
from tests.integration.read.test_duckdb_turns import holder
from tests.prefect.conftest import build_folder
from tests.prefect.test_cli_errors import run_cli


def test_a_flow_run_meeting_a_held_run_is_skipped_and_sends_nothing(
        prefect_api: str, sandbox: SandboxHandle, tmp_path: Path, users_yaml: Path) -> None:
    path = users_yaml
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    run_id = held_run(open_state(state_url), "users")
    warehouse = holder(tmp_path / "warehouse.duckdb", 120)  # the holding run reads it
    try:
        state = asyncio.run(sync_integration(str(path), state_url=state_url, return_state=True))
        assert warehouse.poll() is None  # skipped without waiting for the file
    finally:
        warehouse.kill()
        warehouse.wait(30)
    assert state.is_completed() and state.name == "Skipped", (state.name, state.message)
    assert "integration users: run 1 is still in progress" in str(state.message)
    assert ELSEWHERE in str(state.message)
    runs = open_state(state_url).runs_newest_first("users", 0, 5)
    assert [r["run_id"] for r in runs] == [run_id]  # no run of its own
    assert open_state(state_url).run(run_id)["owner"] == ELSEWHERE  # the lease untouched
    with httpx.Client(base_url=sandbox.control_url, timeout=30) as control:
        assert not Service(sandbox.base_url, control).profiles()


@pytest.mark.parametrize("prefect", [True, False], ids=["prefect", "no-prefect"])
def test_the_cli_says_so_in_one_line_and_exits_75(
        prefect_api: str, sandbox: SandboxHandle, tmp_path: Path, prefect: bool) -> None:
    path = build_folder(tmp_path, sandbox.base_url) / "users.yaml"
    held_run(open_state(f"sqlite:///{tmp_path / 'state.db'}"), "users")
    done = run_cli(prefect_api, tmp_path, path, *([] if prefect else ["--no-prefect"]))
    assert done.returncode == 75, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stdout == ""
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith("engage-sync: integration users: run 1 is still in progress"), last

