"""A Prefect server of this PREFECT_HOME for `engage-sync run` and `demo` when no API URL is set.

Without a server, Prefect starts a temporary one inside every run (10-20 s each time). Instead
the first such command starts `prefect server start` on 127.0.0.1 in the background, says so on
one line, and records it in PREFECT_HOME (MARKER, and Prefect's `server.pid`, so `prefect server
stop` stops it); later commands under the same PREFECT_HOME find it and use it.
`ENGAGE_SYNC_PREFECT_SERVER=temporary` keeps Prefect's temporary server per run.

Invariants:
- A server belongs to its PREFECT_HOME: one is used only when its own settings
  (`/api/admin/settings`) name this PREFECT_HOME, so a run never sends its flow runs to another
  home's server, whichever port it answers on. The candidates are the server recorded here,
  then Prefect's default port (a server this home's user started with `prefect server start`).
- A background server never takes the default port 4200: that is the port of the server one
  starts oneself (the README's production recipe), whose start would otherwise fail while its
  clients reach the background server. It takes the port it had before, else a free one.
- Its own output (Prefect's start banner, uvicorn's and Prefect's server log) goes to LOG in
  PREFECT_HOME; the log of the server before it is kept as LOG.1.
- An explicit API URL wins (PREFECT_API_URL in the environment or in the active profile of
  PREFECT_HOME/profiles.toml): it is returned untouched and nothing is started.
- Finding and starting hold a lock in PREFECT_HOME, so commands started together share one
  server. Nothing here imports Prefect (it runs before Prefect reads its settings); whatever
  fails, the command goes on with Prefect's temporary server, which is given as long to start
  as a background one (Prefect's own 20 s fail a run on a loaded machine) unless the user set
  STARTUP_ENV.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

ENV = "ENGAGE_SYNC_PREFECT_SERVER"
MARKER = "engage-sync-server.json"
LOG = "engage-sync-server.log"
LOCK = "engage-sync-server.lock"
PID_FILE = "server.pid"  # Prefect's own record of its background server (`prefect server stop`)
DEFAULT_PORT = 4200
START_SECONDS = 120.0  # a start under load can take a minute
TEMPORARY = "this run uses a temporary one (10-20 s)"
STARTUP_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"  # the temporary server's wait


def prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()


def use_local_server(say: Callable[[str], None]) -> str | None:
    """The API URL this process uses: an explicit one untouched, else the server of this
    PREFECT_HOME (found, or started and announced with `say`) set as PREFECT_API_URL; None when
    the temporary server is asked for or no server could be had."""
    os.environ.setdefault(STARTUP_ENV, str(int(START_SECONDS)))
    explicit = configured_url()
    if explicit or os.environ.get(ENV, "background") == "temporary":
        return explicit
    home = prefect_home()
    try:
        with _locked(home):
            record = _record(home)
            url = next((u for u, wait in _candidates(record) if serves(u, home, wait)), None)
            url = url or _start(home, record, say)
    except OSError as exc:
        say(f"no Prefect server in the background ({exc}); {TEMPORARY}")
        return None
    if url:
        os.environ["PREFECT_API_URL"] = url
    return url


def configured_url() -> str | None:
    """PREFECT_API_URL from the environment, else from the active profile (`prefect config
    set PREFECT_API_URL=...`), read as Prefect reads it."""
    if url := os.environ.get("PREFECT_API_URL"):
        return url
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or prefect_home() / "profiles.toml")
    with contextlib.suppress(OSError, ValueError, AttributeError):
        profiles = tomllib.loads(path.expanduser().read_text())
        name = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
        url = profiles.get("profiles", {}).get(name, {}).get("PREFECT_API_URL")
        return str(url) if url else None
    return None


def serves(url: str, home: Path, timeout: float = 5.0) -> bool:
    """Whether a Prefect server answers at `url` and its PREFECT_HOME is `home`."""
    try:
        answer = httpx.get(f"{url}/admin/settings", timeout=timeout)
        theirs = answer.json()["home"] if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return False
    return isinstance(theirs, str) and Path(theirs).expanduser().resolve() == home.resolve()


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    with (home / LOCK).open("a") as held:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, two commands may each start a server
            yield
            return
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _record(home: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        record = json.loads((home / MARKER).read_text())
        if isinstance(record, dict):
            return record
    return {}


def _candidates(record: dict[str, Any]) -> list[tuple[str, float]]:
    """The recorded server, given long to answer (a busy server is not replaced by a second
    one on the same database), then the default port's."""
    default = f"http://127.0.0.1:{DEFAULT_PORT}/api"
    recorded = str(record["url"]) if record.get("url") else None
    first = [(recorded, 30.0)] if recorded and recorded != default else []
    return [*first, (default, 5.0)]


def _start(home: Path, record: dict[str, Any], say: Callable[[str], None]) -> str | None:
    log = home / LOG
    if log.exists():
        log.replace(log.with_name(LOG + ".1"))
    for port in _ports(record.get("port")):
        url = f"http://127.0.0.1:{port}/api"
        try:
            with log.open("ab") as out:
                server = subprocess.Popen(
                    [*_prefect(), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    env={**os.environ, "PREFECT_HOME": str(home)}, start_new_session=True)
        except OSError as exc:
            say(f"could not start a Prefect server in the background ({exc}); {TEMPORARY}")
            return None
        ready = _wait(server, url, home)
        if ready:
            _remember(home, url, port, server.pid, say)
            return url
        if ready is None:  # still starting: stopped, so that no server is left unrecorded
            server.terminate()
            say(f"the Prefect server started at {url[:-4]} did not answer within "
                f"{START_SECONDS:.0f} s and was stopped (its log: {log}); {TEMPORARY}")
            return None
    said = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    say(f"no Prefect server in the background ({said[-1] if said else 'it exited'}; its log: "
        f"{log}); {TEMPORARY}")
    return None


def _ports(previous: object) -> Iterator[int]:
    """The port this home's server had before if free, then free ones; never DEFAULT_PORT.
    A free port can be taken before the server binds it: three tries."""
    if isinstance(previous, int) and previous != DEFAULT_PORT and _free(previous):
        yield previous
    for _ in range(3):
        port = _free_port()
        if port != DEFAULT_PORT:
            yield port


def _wait(server: subprocess.Popen[bytes], url: str, home: Path) -> bool | None:
    """True once the server answers as this home's, False if it exits, None at the deadline."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        if serves(url, home):
            return True
        time.sleep(0.5)
    return None


def _remember(home: Path, url: str, port: int, pid: int, say: Callable[[str], None]) -> None:
    (home / MARKER).write_text(json.dumps(
        {"url": url, "port": port, "pid": pid, "home": str(home), "log": str(home / LOG)}))
    pid_file = home / PID_FILE
    stop = f"`kill {pid}`"
    if not _alive(pid_file):  # a live one is another background server's: left to it
        pid_file.write_text(str(pid))
        stop = "`prefect server stop`"
    say(f"started a Prefect server in the background at {url[:-4]} (API and UI) for this and "
        f"later runs under PREFECT_HOME={home}; its log: {home / LOG}; {stop} stops it, "
        f"{ENV}=temporary runs without it")


def _alive(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().strip())
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except (OSError, ValueError):
        return False
    return True


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
