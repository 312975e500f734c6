"""The service's key from a Prefect Secret block named in the integration file
(`service.api_key_block`), on a real Prefect server: the flow run syncs with it, and the key is
in no log line (the server's and this process's), artifact or state record."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from engage_sandbox.web.server import SandboxHandle
from engage_sync.adapters.flows import sync_integration
from engage_sync.adapters.wiring import open_state, run_direct
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import ConfigError
from tests.integration.conftest import write_integration
from tests.prefect.conftest import USERS, build_folder

BLOCK = "engage-api-key-test"


def _integration(tmp_path: Path, base_url: str) -> Path:
    build_folder(tmp_path, base_url)
    return write_integration(tmp_path, "blocked_users", {
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{tmp_path / 'warehouse.duckdb'}"},
        "source": {"table": "users_sync"},
        "service": {"base_url": base_url, "api_key_block": BLOCK,
                    "api_key_env": "NO_KEY_IN_THIS_VARIABLE"}})


def _server_text(api: str, flow_run_id: str) -> str:
    """Every log line and artifact the server holds for the flow run, and the run itself."""
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    run_filter = {"flow_run_id": {"any_": [flow_run_id]}}
    logs = httpx.post(f"{api}/logs/filter", json={"logs": run_filter, "limit": 200})
    arts = httpx.post(f"{api}/artifacts/filter", json={"artifacts": run_filter, "limit": 50})
    run = httpx.get(f"{api}/flow_runs/{flow_run_id}")
    for response in (logs, arts, run):
        response.raise_for_status()
    assert logs.json() and arts.json()  # there is something to look in
    return json.dumps([logs.json(), arts.json(), run.json()])


def _state_text(state_url: str) -> str:
    engine = open_state(state_url).engine
    with engine.connect() as conn:
        return json.dumps([[str(v) for row in conn.exec_driver_sql(f"SELECT * FROM {name}")
                            for v in row] for name in sa.inspect(conn).get_table_names()])


def test_a_key_from_a_secret_block_syncs_and_is_in_no_log_artifact_or_record(
    prefect_api: str, sandbox: SandboxHandle, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from prefect.blocks.system import Secret

    sandbox.reset()
    Secret(value=sandbox.api_key).save(BLOCK, overwrite=True)
    monkeypatch.delenv("ENGAGE_API_KEY", raising=False)  # the block is the only source
    path = _integration(tmp_path, sandbox.base_url)
    state_url = f"sqlite:///{tmp_path / 'state.db'}"

    with caplog.at_level(logging.DEBUG):
        state = asyncio.run(sync_integration(str(path), state_url=state_url, return_state=True))
    assert state.is_completed(), state.message
    (run,) = open_state(state_url).runs_newest_first("blocked_users", 0, 5)
    assert (run["rows_synced"], run["rows_rejected"]) == (USERS, 1)

    key = sandbox.api_key
    assert key not in _server_text(prefect_api, str(state.state_details.flow_run_id))
    assert key not in _state_text(state_url)
    assert key not in caplog.text and caplog.records


def test_a_secret_block_without_prefect_is_a_config_error_naming_the_key(
    tmp_path: Path, sandbox: SandboxHandle,
) -> None:
    path = _integration(tmp_path, sandbox.base_url)
    with pytest.raises(ConfigError, match=r"'service.api_key_block'.*without --no-prefect"):
        run_direct(path, RunOptions(), f"sqlite:///{tmp_path / 'state.db'}")
