"""`engage-sync run` without PREFECT_API_URL: the first run starts a Prefect server of its
PREFECT_HOME in the background and says so; later runs under that home find it and pay no
server start; a server of another home is never used, whatever port it answers on; an explicit
API URL wins (`cli/local_server.py`).

Another home's server is a fake on loopback answering `/api/health` and `/api/admin/settings`
as Prefect's does: discovery asks no more of a server than those two."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from engage_sync.cli import local_server
from engage_sync.cli.local_server import ENV, MARKER, STARTUP_ENV, use_local_server
from tests.integration.conftest import write_integration

BIN = Path(sys.executable).parent
STARTED = "http://127.0.0.1:1/api"  # what the stubbed start returns: "started its own"


@contextlib.contextmanager
def another_homes_server(home: Path, port: int = 0) -> Iterator[str]:
    """A fake Prefect server of `home` on loopback (`port`, or a free one); its API URL."""
    settings = json.dumps({"home": str(home)}).encode()

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {"/api/health": b"true", "/api/admin/settings": settings}.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body or b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def discovery(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Discovery in this process with no API URL configured and the start stubbed (it returns
    STARTED); the lines it says."""
    monkeypatch.delenv(ENV, raising=False)  # tests/conftest.py asks for the temporary server
    for name in ("PREFECT_PROFILE", "PREFECT_PROFILES_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_API_URL", "")  # not set for discovery; restored after the test
    monkeypatch.setattr(local_server, "_start", lambda *args: STARTED)
    return []


def test_a_run_under_another_home_does_not_use_the_server_on_the_default_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, discovery: list[str]) -> None:
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    with another_homes_server(home_a) as demo:  # the demo's server, on the default port
        monkeypatch.setattr(local_server, "DEFAULT_PORT", urlsplit(demo).port)
        monkeypatch.setenv("PREFECT_HOME", str(home_b))
        assert use_local_server(discovery.append) == STARTED
        assert os.environ["PREFECT_API_URL"] == STARTED
        # under its own home the same server is found: the check is by home, not by port
        monkeypatch.setenv("PREFECT_API_URL", "")
        monkeypatch.setenv("PREFECT_HOME", str(home_a))
        assert use_local_server(discovery.append) == demo


def test_a_recorded_server_that_now_answers_for_another_home_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, discovery: list[str]) -> None:
    home_b = tmp_path / "home-b"
    home_b.mkdir()
    with another_homes_server(tmp_path / "home-a") as other:  # took the recorded port
        (home_b / MARKER).write_text(json.dumps({"url": other, "port": 0}))
        monkeypatch.setenv("PREFECT_HOME", str(home_b))
        assert use_local_server(discovery.append) == STARTED


def test_an_api_url_in_the_active_profile_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, discovery: list[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "profiles.toml").write_text(
        'active = "prod"\n[profiles.prod]\nPREFECT_API_URL = "http://127.0.0.1:9/api"\n')
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.setattr(local_server, "_start", lambda *args: pytest.fail("started a server"))
    assert use_local_server(discovery.append) == "http://127.0.0.1:9/api"
    assert os.environ["PREFECT_API_URL"] == ""  # Prefect reads the profile itself
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:8/api")  # the environment first
    assert use_local_server(discovery.append) == "http://127.0.0.1:8/api"
    assert discovery == []


def test_a_background_server_never_takes_the_default_port(tmp_path: Path) -> None:
    """The default port is left to the server one starts oneself (the production recipe)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = int(held.getsockname()[1])
    assert next(local_server._ports(port)) == port  # the port this home's server had before
    default = local_server.DEFAULT_PORT
    assert default not in list(local_server._ports(default))


@contextlib.contextmanager
def default_port_taken(home: Path) -> Iterator[None]:
    """Another home's server on the default port (the README's demo, run before its tests);
    when something already holds the port, that plays the part."""
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError):  # taken: by what, this test does not mind
            held.enter_context(another_homes_server(home, local_server.DEFAULT_PORT))
        yield


@pytest.mark.timeout(900)
def test_the_first_run_leaves_a_server_that_later_runs_use(tmp_path: Path) -> None:
    path = write_integration(tmp_path, "users", {
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{tmp_path / 'wh.duckdb'}"},
        "source": {"query": "SELECT TIMESTAMP '2026-01-01' AS UPDATED_AT, 'u1' AS EXTERNAL_ID, "
                            "'{}' AS PAYLOAD"}})
    home = tmp_path / "prefect-home"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", ENV)}
    env["PREFECT_HOME"] = str(home)
    run = [str(BIN / "engage-sync"), "run", str(path), "--dry-run", "--state-url",
           f"sqlite:///{tmp_path / 'state.db'}"]
    try:
        with default_port_taken(tmp_path / "demo-home"):
            first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=400)
            assert first.returncode == 0, first.stderr[-3000:]
            assert "started a Prefect server in the background at http://127.0.0.1:" in first.stderr
            record = json.loads((home / MARKER).read_text())
            assert record["port"] != local_server.DEFAULT_PORT
            assert local_server.serves(record["url"], home)
            log = (home / local_server.LOG).read_text()  # the server's own output
            assert f"http://127.0.0.1:{record['port']}" in log
            second = subprocess.run(run, env=env, capture_output=True, text=True, timeout=400)
        assert second.returncode == 0, second.stderr[-3000:]
        assert "in the background" not in second.stderr, second.stderr[-3000:]
        assert "temporary server" not in second.stderr
    finally:
        subprocess.run([str(BIN / "prefect"), "server", "stop"], env=env,
                       capture_output=True, timeout=60)
        _gone(home)


def _gone(home: Path) -> None:
    """Wait (generously) until the recorded server has exited, so none outlives the test."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        pid = int(json.loads((home / MARKER).read_text())["pid"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # ProcessLookupError (an OSError) once it has exited
            time.sleep(0.5)
        os.kill(pid, 9)


@pytest.mark.parametrize("set_by_user", [None, "45"])
def test_the_temporary_server_is_given_as_long_to_start_as_a_background_one(
        monkeypatch: pytest.MonkeyPatch, set_by_user: str | None) -> None:
    """Prefect waits 20 s for its temporary server: too short on a loaded machine."""
    monkeypatch.setenv(ENV, "temporary")
    if set_by_user is None:
        monkeypatch.delenv(STARTUP_ENV, raising=False)
    else:
        monkeypatch.setenv(STARTUP_ENV, set_by_user)
    use_local_server(lambda line: None)
    assert os.environ[STARTUP_ENV] == (set_by_user or str(int(local_server.START_SECONDS)))
