"""A throwaway PostgreSQL server on 127.0.0.1 for the tests, started from Debian's binaries.

Skipped when no PostgreSQL binaries are installed, unless ENGAGE_SYNC_REQUIRE_POSTGRES=1 (CI),
where that is an error. As root, the server runs as the `postgres` system user (initdb refuses
root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def find_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One initialised cluster on a free port; `stop` (immediate: as a lost server) and
    `start` may be called again, on the same port and data."""

    def __init__(self, durable: bool = False) -> None:
        """`durable`: commits are synced to disk, as in production (tests turn fsync off)."""
        self.durable = durable
        bindir = find_bindir()
        if bindir is None:
            raise FileNotFoundError("no PostgreSQL binaries (initdb) found")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="engage-pg-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.sock.mkdir()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._run(str(bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8")

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1"
        if not self.durable:
            opts += " -c fsync=off"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                  str(self.root / "log"), "-w", "start")

    def stop(self) -> None:
        subprocess.run([*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m",
                        "immediate", "stop"], check=False, capture_output=True)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_instance() -> Iterator[PostgresServer]:
    """A fresh, started server; stopped and its files removed after."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields a SQLAlchemy URL of a fresh server; stops it and removes its files after."""
    with postgres_instance() as server:
        yield server.url
