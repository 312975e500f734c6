"""`deployments/serve.py` stops cleanly on SIGINT (a terminal's Ctrl-C reaches its whole process
group) and on SIGTERM: with runs in flight every schedule is paused, the runs in flight end
Cancelled, no run is left Running or Pending without a process nor due on a paused schedule,
and nothing prints a traceback; with the Prefect server gone it gives up pausing after a bounded
wait and says so (Prefect's own runner retried for more than 30 s). Waits are on conditions,
with deadlines generous enough for a busy machine."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from prefect.client.schemas.objects import StateType

from engage_sandbox.web.server import SandboxHandle
from tests.prefect.conftest import (
    _stop,
    build_folder,
    start_prefect_server,
    start_serve,
    wait_for_deployments,
)
from tests.prefect.served_runs import (
    ACTIVE,
    ENDED,
    in_state,
    named_folder,
    paused,
    runs_of,
    slow_sandbox,
    states,
    wait_until,
)

STOP_DEADLINE = 120.0  # generous: pausing, runs in flight stopping, marking on a busy machine
# The server gone: serve.py asks its health once (no retries) and exits, within about a second
# on two busy cores; only a process that hangs (Prefect's own pause retried for more than
# 30 s, and more on a busy machine) misses this generous deadline.
GONE_DEADLINE = 120.0
SERVING = "serving: every deployment registered"


def paused_users(api: str) -> bool | None:
    """Whether engage-sync/users is paused; None before serve.py registered it."""
    answer = httpx.get(f"{api}/deployments/name/engage-sync/users", timeout=5)
    return bool(answer.json()["paused"]) if answer.status_code == 200 else None


def wait_served(api: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until serve.py has registered every deployment, with their schedules active, and says it
    serves (serve.py takes signals from before it registers, so a stop any time after this is
    a full stop; a server stopped while it still registers makes it fail instead, and on a busy
    machine the users deployment shows active before the others are registered)."""
    def active() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        return paused_users(api) is False and SERVING in log.read_text()

    wait_until(active, 90, lambda: log.read_text()[-3000:])


def stopped(proc: subprocess.Popen[bytes], signum: int, deadline: float, log: Path) -> int:
    """Send `signum` to serve.py's process group (a terminal's Ctrl-C reaches every process of
    the foreground group) and return its exit status."""
    os.killpg(proc.pid, signum)
    try:
        return proc.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve.py still running {deadline} s after {signum!r}:\n"
                    f"{log.read_text()[-3000:]}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_with_runs_in_flight_pauses_and_cancels_them_without_a_traceback(
    prefect_api: str, sandbox: SandboxHandle, tmp_path: Path, signum: signal.Signals
) -> None:
    names = tuple(f"stop_{signum.name.lower()}_{n}" for n in ("users", "events", "users_2"))
    folder = named_folder(tmp_path, sandbox.base_url, *names)
    log = tmp_path / "serve.log"
    with slow_sandbox(sandbox, 8.0):  # a first run's request: in flight for 8 s
        proc = start_serve(folder, f"sqlite:///{tmp_path / 'state.db'}", prefect_api,
                           sandbox.api_key, log, "--interval", "2s", "--limit", "2")
        try:
            wait_for_deployments(proc, log, *(f"engage-sync/{n}" for n in names))

            def two_running() -> bool:
                assert proc.poll() is None, log.read_text()[-3000:]
                return len(runs_of(*names, types=(StateType.RUNNING,))) >= 2

            wait_until(two_running, 120, lambda: states(runs_of(*names, types=ENDED + ACTIVE)))
            returncode = stopped(proc, signum, STOP_DEADLINE, log)
        finally:
            _stop(proc)
    text = log.read_text()
    assert returncode == 0, text[-3000:]
    assert "Traceback" not in text, text[-5000:]
    assert paused(*names) == dict.fromkeys(names, True)
    left = runs_of(*names, types=ACTIVE)
    assert not left, f"{states(left)}\n{text[-3000:]}"
    due = [r for r in runs_of(*names, types=(StateType.SCHEDULED,)) if r.auto_scheduled]
    assert not due, states(due)  # a paused schedule's runs: none left to start on a resume
    ended = runs_of(*names, types=ENDED)
    cancelled = [r for r in in_state(ended, StateType.CANCELLED)
                 if f"serve.py stopped ({signum.name})" in str(r.state and r.state.message)]
    assert len(cancelled) >= 2, states(ended)  # the two in flight, at least
    assert not in_state(ended, StateType.CRASHED, StateType.FAILED), states(ended)


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
        assert stopped(procs[0], signal.SIGINT, STOP_DEADLINE, log) == 0, log.read_text()[-3000:]
        assert paused_users(api), log.read_text()[-3000:]

        log = tmp_path / "serve-2.log"
        procs.append(start_serve(folder, state_url, api, sandbox.api_key, log,
                                 "--cron", "0 0 1 1 *"))
        wait_served(api, procs[1], log)  # serving again resumes the schedules
        _stop(server)
        assert stopped(procs[1], signal.SIGTERM, GONE_DEADLINE, log) == 0, \
            log.read_text()[-3000:]
        # what it did rather than how long it took: one health check, no pause tried (Prefect's
        # own retries), and one line of what to do in the UI
        assert ("the Prefect server does not answer: schedules not paused, 0 flow run(s) not "
                "marked Cancelled; pause and cancel them in the UI") in log.read_text()
        assert "did not answer in" not in log.read_text()  # no pause waited for
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        for proc in procs:
            _stop(proc)
        _stop(server)
