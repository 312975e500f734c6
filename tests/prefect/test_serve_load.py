"""`deployments/serve.py` under load: three deployments due every 3 s against a sandbox that
answers slowly run at most the configured number of flow runs at once (ENGAGE_SYNC_SERVE_LIMIT
here), and none crashes. Without a limit every due run started its own process at once."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from prefect.client.schemas.objects import StateType

from engage_sandbox.web.server import SandboxHandle
from tests.prefect.conftest import ROOT, _stop, start_serve, wait_for_deployments
from tests.prefect.served_runs import (
    ACTIVE,
    ENDED,
    in_state,
    named_folder,
    runs_of,
    slow_sandbox,
    states,
    wait_until,
)

NAMES = ("load_users", "load_events", "load_users_2")
LIMIT = 2
FINISHED = 6  # flow runs ended before the test stops serving


def serve_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serve", ROOT / "deployments" / "serve.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_limit_comes_from_the_flag_the_environment_or_the_cpus() -> None:
    serve = serve_module()
    assert serve.serve_limit(3, {"ENGAGE_SYNC_SERVE_LIMIT": "1"}) == 3
    assert serve.serve_limit(None, {"ENGAGE_SYNC_SERVE_LIMIT": "1"}) == 1
    assert serve.serve_limit(None, {"ENGAGE_SYNC_SERVE_LIMIT": "0"}) is None  # no limit
    assert serve.serve_limit(None, {}) == serve.default_limit()
    assert 1 <= serve.default_limit() <= serve.LIMIT_CAP
    with pytest.raises(SystemExit, match="not a whole number"):
        serve.serve_limit(None, {"ENGAGE_SYNC_SERVE_LIMIT": "two"})


def test_served_deployments_run_at_most_the_limit_at_once_and_none_crashes(
    prefect_api: str, sandbox: SandboxHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = named_folder(tmp_path, sandbox.base_url, *NAMES)
    log = tmp_path / "serve.log"
    monkeypatch.setenv("ENGAGE_SYNC_SERVE_LIMIT", str(LIMIT))
    peak = 0

    def enough_ended() -> bool:
        nonlocal peak
        assert proc.poll() is None, log.read_text()[-3000:]
        peak = max(peak, len(runs_of(*NAMES, types=(StateType.RUNNING,))))
        return len(runs_of(*NAMES, types=ENDED)) >= FINISHED

    with slow_sandbox(sandbox, 1.5):
        proc: subprocess.Popen[bytes] = start_serve(
            folder, f"sqlite:///{tmp_path / 'state.db'}", prefect_api, sandbox.api_key, log,
            "--interval", "3s")
        try:
            wait_for_deployments(proc, log, *(f"engage-sync/{n}" for n in NAMES))
            wait_until(enough_ended, 150,
                       lambda: f"{states(runs_of(*NAMES, types=ENDED + ACTIVE))}; peak {peak}")
        finally:
            _stop(proc)
    runs = runs_of(*NAMES, types=ENDED + ACTIVE)
    assert 1 <= peak <= LIMIT, f"{peak} flow runs Running at once; {states(runs)}"
    bad = in_state(runs, StateType.CRASHED, StateType.FAILED)
    assert not bad, f"{states(bad)}\n{log.read_text()[-3000:]}"
