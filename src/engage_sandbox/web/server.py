"""Run the sandbox on a loopback port: in a background thread, or as a child process.

Invariants: the server binds 127.0.0.1 only; port 0 means a free port chosen by the OS; the
context manager returns only once the server answers, and on exit stops it and waits for it.
In the foreground (`serve_until_stopped`, the CLI), SIGINT and SIGTERM stop the server: its
socket is closed when the call returns, so a restart on the same port binds at once.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from engage_sandbox.state.settings import DEFAULT_RATE_LIMITS, SandboxSettings
from engage_sandbox.web.app import create_app

HOST = "127.0.0.1"
DEMO_API_KEY = "sandbox-demo-key"  # SANDBOX ONLY: the demo seed's all-permissions key
STARTUP_TIMEOUT = 20.0
GRACEFUL_STOP = 3  # seconds requests in flight get to finish once the server is told to stop
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SandboxStartError(RuntimeError):
    """The sandbox did not come up in time (the message carries its error output)."""


@dataclass
class SandboxHandle:
    """A running sandbox: where it is and how to talk to it."""

    base_url: str
    api_key: str = DEMO_API_KEY
    app: Any = None  # the Starlette app when run in this process

    @property
    def control_url(self) -> str:
        """Base of the control plane, e.g. ``http://127.0.0.1:PORT/_sandbox``."""
        return f"{self.base_url}/_sandbox"

    def reset(self) -> None:
        """POST /_sandbox/reset."""
        httpx.post(f"{self.control_url}/reset", timeout=10).raise_for_status()


def bind_loopback(port: int = 0) -> socket.socket:
    """A TCP socket bound to 127.0.0.1:port (0 = any free port), not yet listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this: answers go out at once instead of waiting on the
    # peer's delayed ACK when headers and body are written separately (a delay on every request).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((HOST, port))
    return sock


def bind_problem(port: int, exc: OSError) -> str:
    """Why 127.0.0.1:port could not be bound, on one line."""
    if exc.errno == errno.EADDRINUSE:
        return (f"{HOST}:{port} is already in use (a sandbox still running? stop it, "
                "or pass another --port)")
    return f"cannot listen on {HOST}:{port}: {exc.strerror or exc}"


def uvicorn_config(app: Any, log_level: str = "warning") -> uvicorn.Config:
    """The uvicorn configuration used by the thread runner and the CLI."""
    return uvicorn.Config(
        app, log_level=log_level, access_log=False, lifespan="off", timeout_keep_alive=30,
        timeout_graceful_shutdown=GRACEFUL_STOP,
    )


def serve_until_stopped(server: uvicorn.Server, sock: socket.socket) -> str | None:
    """Serve on `sock` until SIGINT or SIGTERM; return the signal's name once the server has
    stopped and the socket is closed (None: it ended without one, a failed start). A second
    signal stops it at once.

    uvicorn runs in a thread so that the signals are handled here: in the main thread it
    raises them again after its own shutdown, which ends the process with a KeyboardInterrupt
    traceback (SIGINT) or killed by the signal (SIGTERM)."""
    received: list[str] = []

    def handle(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        server.force_exit = server.should_exit  # a second signal: no graceful wait
        server.should_exit = True

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="engage-sandbox", daemon=True)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.5)
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return received[0] if received else None


def _settings(
    seed: Any, lean: bool, settings: SandboxSettings | None
) -> SandboxSettings:
    if settings is None:
        return SandboxSettings(seed=seed, lean=lean)
    changes: dict[str, Any] = {}
    if seed is not None:
        changes["seed"] = seed
    if lean:
        changes["lean"] = True
    return dataclasses.replace(settings, **changes)


@contextmanager
def run_sandbox(
    *,
    seed: str | Path | dict[str, Any] | None = None,
    lean: bool = False,
    port: int = 0,
    settings: SandboxSettings | None = None,
    in_process: bool = True,
) -> Iterator[SandboxHandle]:
    """Serve a sandbox on 127.0.0.1 for the duration of the ``with`` block.

    ``seed``/``lean`` override the same fields of ``settings``. ``in_process`` runs uvicorn
    in a daemon thread of this process; otherwise ``python -m engage_sandbox.cli`` runs as a
    child process. Raises :class:`SandboxStartError` when it does not come up.
    """
    effective = _settings(seed, lean, settings)
    runner = _in_thread if in_process else _in_child
    with runner(effective, port) as handle:
        yield handle


@contextmanager
def _in_thread(settings: SandboxSettings, port: int) -> Iterator[SandboxHandle]:
    app = create_app(settings)
    sock = bind_loopback(port)
    server = uvicorn.Server(uvicorn_config(app))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="engage-sandbox", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise SandboxStartError("the in-process sandbox did not start")
        time.sleep(0.01)
    try:
        yield SandboxHandle(base_url=f"http://{HOST}:{sock.getsockname()[1]}", app=app)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def cli_args(settings: SandboxSettings, port: int, workdir: Path) -> list[str]:
    """Command-line arguments of ``engage_sandbox.cli`` equivalent to ``settings``."""
    args = ["--port", str(port), "--limit-mode", settings.limit_mode]
    if settings.seed is not None:
        seed_path = settings.seed
        if isinstance(seed_path, dict):
            seed_path = workdir / "seed.yaml"
            seed_path.write_text(yaml.safe_dump(settings.seed), "utf-8")
        args += ["--seed", str(seed_path)]
    if settings.faults:
        faults_path = workdir / "faults.yaml"
        faults_path.write_text(yaml.safe_dump(list(settings.faults)), "utf-8")
        args += ["--faults", str(faults_path)]
    if settings.lean:
        args.append("--lean")
    if not settings.rate_limiting:
        args.append("--no-rate-limits")
    if settings.max_body_bytes != SandboxSettings().max_body_bytes:
        args += ["--max-body-bytes", str(settings.max_body_bytes)]
    for group, rule in settings.rate_limits.items():
        if rule != DEFAULT_RATE_LIMITS[group]:
            args += ["--rate-limit", f"{group}={rule.limit}/{rule.window_seconds}"]
    return args


def _wait_healthy(base_url: str, proc: subprocess.Popen[bytes], deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{base_url}/_sandbox/health", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return False


@contextmanager
def _in_child(settings: SandboxSettings, port: int) -> Iterator[SandboxHandle]:
    with tempfile.TemporaryDirectory(prefix="engage-sandbox-") as tmp:
        workdir = Path(tmp)
        if port == 0:
            with bind_loopback(0) as probe:
                port = probe.getsockname()[1]
        errors = (workdir / "stderr.log").open("wb")
        cmd = [sys.executable, "-m", "engage_sandbox.cli", *cli_args(settings, port, workdir)]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=errors, env={**os.environ}
        )
        base_url = f"http://{HOST}:{port}"
        try:
            if not _wait_healthy(base_url, proc, time.monotonic() + STARTUP_TIMEOUT):
                errors.flush()
                tail = (workdir / "stderr.log").read_text("utf-8", "replace")[-2000:]
                raise SandboxStartError(f"sandbox child did not start: {' '.join(cmd)}\n{tail}")
            yield SandboxHandle(base_url=base_url)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            errors.close()
