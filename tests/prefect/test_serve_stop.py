"""`deployments/serve.py` stops within seconds on SIGINT and SIGTERM, pausing its schedules
when the Prefect server answers and giving up on that after a bounded wait when it is gone
(Prefect's own runner retried for more than 30 s)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import httpx

from engage_sandbox.server import SandboxHandle
from tests.prefect.conftest import _stop, build_folder, start_prefect_server, start_serve

STOP_SECONDS = 9.0  # PAUSE_SECONDS (6) and the runner's own shutdown


def paused(api: str) -> bool | None:
    """Whether engage-sync/users is paused; None before serve.py registered it."""
    answer = httpx.get(f"{api}/deployments/name/engage-sync/users", timeout=5)
    return bool(answer.json()["paused"]) if answer.status_code == 200 else None


def wait_served(api: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until serve.py has registered the deployment with its schedules active."""
    deadline = time.monotonic() + 60
    while paused(api) is not False:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    time.sleep(3)  # the runner registers deployments before it starts polling (and pausing)


def stop_time(proc: subprocess.Popen[bytes], signum: int) -> float:
    started = time.monotonic()
    proc.send_signal(signum)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        return float("inf")
    return time.monotonic() - started


def test_serve_stops_on_sigint_and_on_sigterm_with_the_server_gone(
    sandbox: SandboxHandle, tmp_path: Path
) -> None:
    folder = build_folder(tmp_path, sandbox.base_url)
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    home = tmp_path / "prefect-home"
    home.mkdir()
    server, api = start_prefect_server(home)
    procs = []
    try:
        log = tmp_path / "serve-1.log"
        procs.append(start_serve(folder, state_url, api, sandbox.api_key, log,
                                 "--cron", "0 0 1 1 *"))
        wait_served(api, procs[0], log)
        assert stop_time(procs[0], signal.SIGINT) < STOP_SECONDS, log.read_text()[-3000:]
        assert procs[0].returncode == 0, log.read_text()[-3000:]
        assert paused(api), log.read_text()[-3000:]

        log = tmp_path / "serve-2.log"
        procs.append(start_serve(folder, state_url, api, sandbox.api_key, log,
                                 "--cron", "0 0 1 1 *"))
        wait_served(api, procs[1], log)  # serving again resumes the schedules
        _stop(server)
        assert stop_time(procs[1], signal.SIGTERM) < STOP_SECONDS, log.read_text()[-3000:]
        assert "schedules not paused" in log.read_text()
    finally:
        for proc in procs:
            _stop(proc)
        _stop(server)
