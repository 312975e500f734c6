"""Snowflake as the tests see it: fakesnow's HTTP server (DuckDB underneath) on 127.0.0.1,
spoken to by the real `snowflake-connector-python` through `warehouse.connect_args` (`host`,
`port`, `protocol`), exactly as a user points engage-sync at a private-link host."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tests.pg_server import free_port

ACCOUNT, USER, PASSWORD, DATABASE = "fakeaccount", "SYNC_USER", "emulator-pw", "ANALYTICS"


@dataclass
class Emulator:
    port: int

    @property
    def url(self) -> str:
        """The URL an integration file names (no password: it comes from connect_args)."""
        return f"snowflake://{USER}@{ACCOUNT}/{DATABASE}/PUBLIC"

    def connect_args(self, password: str = PASSWORD) -> dict[str, Any]:
        return {"host": "127.0.0.1", "port": self.port, "protocol": "http",
                "password": password}

    def engine(self) -> sa.Engine:
        return sa.create_engine(self.url, connect_args=self.connect_args())

    def execute(self, *statements: str) -> None:
        engine = self.engine()
        try:
            with engine.begin() as conn:
                for sql in statements:
                    conn.exec_driver_sql(sql)
        finally:
            engine.dispose()


@contextmanager
def snowflake_emulator() -> Iterator[Emulator]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fakesnow", "-s", "--host", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the Snowflake emulator did not start: "
                                       + (proc.stderr.read().decode()[-2000:]
                                          if proc.stderr else "")) from None
                time.sleep(0.2)
        emulator = Emulator(port)
        emulator.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}",
                         f"CREATE SCHEMA IF NOT EXISTS {DATABASE}.PUBLIC")
        yield emulator
    finally:
        proc.terminate()
        proc.wait(timeout=30)
