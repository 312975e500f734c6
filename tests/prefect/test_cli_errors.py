"""`engage-sync run` under Prefect (the default path): expected failures end with one line on
stderr naming the file, key or table and the fix, exit 2 and print no traceback unless
`--debug`; the flow run fails with the same message. Each case runs the CLI as a subprocess
against the session's Prefect server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterName,
    LogFilter,
    LogFilterFlowRunId,
)

from engage_sandbox.web.server import SandboxHandle
from engage_sync.demo.main import free_port
from tests.integration.conftest import write_integration
from tests.prefect.conftest import build_folder

CLI = Path(sys.executable).parent / "engage-sync"


def run_cli(prefect_api: str, tmp_path: Path, path: Path, *extra: str,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PREFECT_API_URL": prefect_api, "ENGAGE_API_KEY": "unused",
               **(env or {})}
    return subprocess.run(
        [str(CLI), "run", str(path), "--state-url", f"sqlite:///{tmp_path / 'state.db'}",
         *extra], env=environ, capture_output=True, text=True, timeout=120)


def warehouse(tmp_path: Path, base_url: str) -> str:
    """The DuckDB warehouse of the served-folder tests (users_sync, events_sync)."""
    build_folder(tmp_path, base_url)
    return f"duckdb:///{tmp_path / 'warehouse.duckdb'}"


def integration(tmp_path: Path, name: str, url: str, base_url: str, **extra: object) -> Path:
    return write_integration(tmp_path, name, {
        "kind": "attributes", "warehouse": {"url": url}, "source": {"table": "users_sync"},
        "service": {"base_url": base_url, "retry_deadline_seconds": 5}, **extra})


def assert_one_line(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "nanobind" not in done.stderr  # DuckDB objects freed before exit (prefect_exit)
    lines = [line for line in done.stderr.splitlines() if line.startswith("engage-sync: ")]
    assert len(lines) == 1, done.stderr[-3000:]
    assert done.stderr.rstrip().splitlines()[-1] == lines[0]  # the last line
    for needle in needles:
        assert needle in lines[0]
    return lines[0].removeprefix("engage-sync: ")


def flow_run_message(name: str) -> str:
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
    assert len(runs) == 1 and runs[0].state is not None
    assert runs[0].state.is_failed()
    return runs[0].state.message or ""


def test_a_bad_config_key_names_the_file_and_key(prefect_api: str, tmp_path: Path) -> None:
    path = tmp_path / "typo_users.yaml"
    path.write_text("kind: attributes\nsource: {table: users_sync}\nservce: {}\n")
    line = assert_one_line(run_cli(prefect_api, tmp_path, path),
                           f"file {path}", "key 'servce'", "fix")
    assert line in flow_run_message("typo_users-incremental")


def flow_run_logs(name: str, last: str, timeout: float = 60) -> list[str]:
    """The messages of flow run `name`'s logs, once one starts with `last` (its final line)."""
    with get_client(sync_client=True) as client:
        run, = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name])))
        deadline = time.monotonic() + timeout
        while True:
            said = [log.message for log in client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))]
            if any(m.startswith(last) for m in said) or time.monotonic() > deadline:
                return said
            time.sleep(0.5)


def test_a_failure_is_said_once_in_the_users_words(prefect_api: str, tmp_path: Path) -> None:
    """Not three times (Prefect's exception line, its final state, the command's own), and
    never as an internal class: once on stderr, once in the flow run's logs, and the run's
    state message is that line."""
    path = tmp_path / "said_once.yaml"
    path.write_text("kind: attributes\nsource: {table: users_sync}\nservce: {}\n")
    done = run_cli(prefect_api, tmp_path, path)
    line = assert_one_line(done, "key 'servce'")
    assert done.stderr.count("servce") == 1, done.stderr
    assert "SyncAlert" not in done.stderr and "encountered an exception" not in done.stderr
    assert flow_run_message("said_once-incremental") == line
    logs = flow_run_logs("said_once-incremental", "Finished in state")
    assert [m for m in logs if "servce" in m] == [f"Finished in state Failed({line!r})"], logs
    assert not any("SyncAlert" in m for m in logs), logs


def test_a_missing_table_names_the_table_and_the_keys_to_fix(
    prefect_api: str, tmp_path: Path, sandbox: SandboxHandle
) -> None:
    url = warehouse(tmp_path, sandbox.base_url)
    path = integration(tmp_path, "no_table", url, sandbox.base_url, source={"table": "nosuch"})
    assert_one_line(run_cli(prefect_api, tmp_path, path,  # a wrong key would be said first
                            env={"ENGAGE_API_KEY": sandbox.api_key}),
                    "integration no_table", "table nosuch", "check source.table")


def test_an_unreachable_warehouse_says_so(prefect_api: str, tmp_path: Path,
                                          sandbox: SandboxHandle) -> None:
    url = f"postgresql+psycopg://sync:secret-pw@127.0.0.1:{free_port()}/analytics"
    path = integration(tmp_path, "no_wh", url, sandbox.base_url)
    done = run_cli(prefect_api, tmp_path, path, env={"ENGAGE_API_KEY": sandbox.api_key})
    assert_one_line(done, "integration no_wh", "cannot connect to the warehouse",
                    "check the host and port in warehouse.url")
    assert "secret-pw" not in done.stderr


def test_a_missing_key_variable_names_the_variable(prefect_api: str, tmp_path: Path,
                                                   sandbox: SandboxHandle) -> None:
    path = integration(tmp_path, "no_key", warehouse(tmp_path, sandbox.base_url), sandbox.base_url,
                       service={"base_url": sandbox.base_url, "api_key_env": "I8_NO_SUCH_KEY"})
    assert_one_line(run_cli(prefect_api, tmp_path, path),
                    "integration no_key", "I8_NO_SUCH_KEY", "export I8_NO_SUCH_KEY=")


def test_a_refused_key_stops_the_run_with_one_line(prefect_api: str, tmp_path: Path,
                                                   sandbox: SandboxHandle) -> None:
    path = integration(tmp_path, "refused", warehouse(tmp_path, sandbox.base_url), sandbox.base_url)
    done = run_cli(prefect_api, tmp_path, path, env={"ENGAGE_API_KEY": "not-a-sandbox-key"})
    line = assert_one_line(done, "integration refused", "401", "service.api_key_env")
    assert "not-a-sandbox-key" not in done.stderr
    assert line in flow_run_message("refused-incremental")


def test_debug_shows_the_traceback(prefect_api: str, tmp_path: Path) -> None:
    path = tmp_path / "typo_debug.yaml"
    path.write_text("kind: attributes\nsource: {table: users_sync}\nservce: {}\n")
    done = run_cli(prefect_api, tmp_path, path, env={"ENGAGE_SYNC_LOG_LEVEL": "INFO"})
    assert "Traceback" not in done.stderr
    debug = subprocess.run([str(CLI), "--debug", "run", str(path), "--state-url",
                            f"sqlite:///{tmp_path / 'state.db'}"],
                           env={**os.environ, "PREFECT_API_URL": prefect_api},
                           capture_output=True, text=True, timeout=120)
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr


@pytest.fixture(autouse=True)
def _no_sandbox_state(sandbox: SandboxHandle) -> None:
    sandbox.reset()
