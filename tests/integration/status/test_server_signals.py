"""`engage-sync sandbox` and `engage-sync status-server` as a user runs them: the real commands,
each a subprocess in a session of its own on a free loopback port. SIGTERM and Ctrl-C (SIGINT to
the whole process group, as a terminal sends it) stop the command and every process it started,
free the port so that a restart on it works, and print one line, no traceback; a port already in
use is one line and a non-zero exit. Waits are conditions with generous deadlines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from engage_sync.adapters.wiring import open_state
from engage_sync.demo.main import free_port
from tests.integration.conftest import Service, Warehouse, table_integration, user_rows

ENGAGE_SYNC = str(Path(sys.executable).parent / "engage-sync")
TOKEN = "test-token-0123456789abcdef"
DEADLINE = 60.0


def wait_until(condition: Callable[[], bool], timeout: float = DEADLINE) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def port_free(port: int) -> bool:
    """Whether a server could bind the port now (with SO_REUSEADDR, as both servers do)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def answers(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2,
                  headers={"Authorization": f"Bearer {TOKEN}"})
    except httpx.HTTPError:
        return False
    return True


@contextmanager
def started(argv: list[str], tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The command in a new session (its process group), answering; the group killed after."""
    env = {**os.environ, "ENGAGE_SYNC_STATUS_TOKEN": TOKEN}
    proc = subprocess.Popen([ENGAGE_SYNC, *argv], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield proc
    finally:
        if not group_gone(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def commands(tmp_path: Path, port: int) -> dict[str, list[str]]:
    return {"sandbox": ["sandbox", "--port", str(port)],
            "status-server": ["status-server", "--port", str(port), "--config-dir",
                              str(tmp_path), "--state-url", f"sqlite:///{tmp_path / 's.db'}"]}


def stop(proc: subprocess.Popen[bytes], port: int, signum: signal.Signals) -> list[str]:
    """Signal the command as a user would; once its port is free and its group gone, its
    output lines but uvicorn's access-log lines."""
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the whole group
    else:
        proc.send_signal(signum)  # `kill PID`: the command alone
    assert wait_until(lambda: port_free(port)), f"port {port} still held after {signum.name}"
    out, _ = proc.communicate(timeout=DEADLINE)  # reaped: the group is then its children
    assert wait_until(lambda: group_gone(proc.pid)), f"a child outlived {signum.name}"
    assert proc.returncode == 0, out.decode()
    return [line for line in out.decode().splitlines() if "HTTP/1.1" not in line]


@pytest.mark.parametrize("name", ["sandbox", "status-server"])
def test_sigterm_then_ctrl_c_stop_it_free_its_port_and_say_so_once(
        name: str, tmp_path: Path) -> None:
    port = free_port()
    argv = commands(tmp_path, port)[name]
    for signum in (signal.SIGTERM, signal.SIGINT):  # the second start is a restart on the port
        with started(argv, tmp_path) as proc:
            assert wait_until(lambda proc=proc: answers(port) or proc.poll() is not None)
            assert proc.poll() is None, proc.communicate()[0].decode()
            lines = stop(proc, port, signum)
        assert len(lines) == 2, lines  # what it serves, then that it stopped: no traceback
        assert "listening on" in lines[0]
        assert f"stopped by {signum.name}" in lines[1] and f"127.0.0.1:{port} is free" in lines[1]


@pytest.mark.parametrize("name", ["sandbox", "status-server"])
def test_a_port_in_use_is_one_line_and_a_failure(name: str, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with started(commands(tmp_path, port)[name], tmp_path) as proc:
            out, _ = proc.communicate(timeout=DEADLINE)
    lines = out.decode().splitlines()
    assert proc.returncode not in (0, None)
    assert len(lines) == 1, lines
    assert f"127.0.0.1:{port} is already in use" in lines[0]


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_sigterm_stops_the_status_servers_run_in_flight_resumable(
        warehouse: Warehouse, service: Service, tmp_path: Path) -> None:
    """A run the server started (POST .../sync) is its child: SIGTERM stops it as `engage-sync
    run` stops, its requests in flight settled and its lease released, before the server
    ends."""
    folder = tmp_path / "config"
    folder.mkdir()
    table_integration(warehouse, service, folder, "attributes", user_rows(3000))  # 40 requests
    service.faults([{"path": "/users/track", "action": "delay", "delay_seconds": 1.0}])
    warehouse.engine.dispose()  # the DuckDB file's lock, for the server's run
    port = free_port()
    state_url = f"sqlite:///{tmp_path / 's.db'}"
    argv = ["status-server", "--port", str(port), "--config-dir", str(folder),
            "--state-url", state_url]
    with started(argv, tmp_path) as proc:
        assert wait_until(lambda: answers(port) or proc.poll() is not None)
        assert httpx.post(f"http://127.0.0.1:{port}/cdi/integrations/users/sync", timeout=30,
                          headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 202
        assert wait_until(lambda: any(  # sending, mid-run
            "/users/track" in path for path in service.counters()["requests"]))
        lines = stop(proc, port, signal.SIGTERM)
    assert "stopped by SIGTERM" in lines[-1] and "Traceback" not in "\n".join(lines), lines
    assert any("resumable" in line for line in lines), lines
    state = open_state(state_url)
    assert not state.has_live_run("users")  # the lease released: the next run resumes now
    assert state.count_runs("users") == 1
