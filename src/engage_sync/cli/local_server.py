"""A Prefect server for `engage-sync run` and `engage-sync demo` when PREFECT_API_URL is not set.

Without a server, Prefect starts a temporary one inside every run (10-20 s each time). Instead
the first such command starts `prefect server start --background` on 127.0.0.1 (port 4200, or
a free one) in PREFECT_HOME, says so on one line, and later commands find it and use it
(`prefect server stop` stops it). `ENGAGE_SYNC_PREFECT_SERVER=temporary` keeps Prefect's
temporary server per run.

Invariants: nothing here imports Prefect (it runs before Prefect reads its settings); a server
is used only once its health endpoint answers; whatever fails, the command goes on with
Prefect's temporary server, as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ENV = "ENGAGE_SYNC_PREFECT_SERVER"
MARKER = "engage-sync-server.json"
DEFAULT_PORT = 4200
START_SECONDS = 90.0


def prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()


def use_local_server(say: Callable[[str], None]) -> str | None:
    """Point this process at a background Prefect server (found, or started and announced with
    `say`); its API URL, or None when PREFECT_API_URL is set, the temporary server is asked for,
    or no server could be had."""
    if os.environ.get("PREFECT_API_URL") or os.environ.get(ENV, "background") == "temporary":
        return None
    marker = prefect_home() / MARKER
    url = next((u for u in _known(marker) if healthy(u)), None)
    if url is None:
        url = _start(say)
        if url is None:
            return None
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"url": url}))
    os.environ["PREFECT_API_URL"] = url
    return url


def _known(marker: Path) -> list[str]:
    """The server this module started last, then Prefect's default background server."""
    urls = []
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        urls.append(str(json.loads(marker.read_text())["url"]))
    return [*urls, f"http://127.0.0.1:{DEFAULT_PORT}/api"]


def healthy(url: str, timeout: float = 1.0) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def _start(say: Callable[[str], None]) -> str | None:
    port = DEFAULT_PORT if _free(DEFAULT_PORT) else _free_port()
    url = f"http://127.0.0.1:{port}/api"
    try:
        done = subprocess.run([*_prefect(), "server", "start", "--background", "--host",
                               "127.0.0.1", "--port", str(port)], capture_output=True,
                              text=True, timeout=START_SECONDS, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"could not start a Prefect server in the background ({exc}); this run uses a "
            "temporary one (10-20 s)")
        return None
    deadline = time.monotonic() + START_SECONDS
    while done.returncode == 0 and time.monotonic() < deadline:
        if healthy(url):
            say(f"started a Prefect server in the background at {url[:-4]} (API and UI) for "
                "this and later runs; `prefect server stop` stops it, "
                f"{ENV}=temporary runs without it")
            return url
        time.sleep(0.25)
    said = (done.stdout + done.stderr).strip().splitlines()
    say(f"no Prefect server in the background ({said[-1] if said else 'not healthy'}); this "
        "run uses a temporary one (10-20 s)")
    return None


def _prefect() -> list[str]:
    script = Path(sys.executable).parent / "prefect"
    return [str(script)] if script.exists() else [sys.executable, "-m", "prefect"]


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
