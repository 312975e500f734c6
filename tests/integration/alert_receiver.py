"""A webhook receiver on loopback for alert tests, and the scenario both the webhook and the
Prefect event tests drive: runs of about 10,000 rows, one of 100, one of rejected rows.

Every value seeded holds `TOKEN`, so a body that holds no `TOKEN` holds no row's value."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.integration.conftest import T0, Warehouse

TOKEN = f"zq{secrets.token_hex(4)}"
NORMAL, SMALL = 10_000, 100


class Receiver:
    """The JSON bodies POSTed to it, in order; answers `status` (200 by default)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.status = 200
        self.path = f"/hooks/secret-{secrets.token_hex(8)}"
        self._lock = threading.Lock()

    def alerts(self) -> list[tuple[str, str]]:
        """(condition, change) of each alert received, from Slack's `text`."""
        out = []
        with self._lock:
            for body in self.bodies:
                words = body["text"].split()
                out.append((words[1], words[3]))  # "engage-sync: volume alert raised for ..."
        return out

    def wait_for(self, count: int, timeout: float = 60) -> list[tuple[str, str]]:
        deadline = time.monotonic() + timeout
        while len(self.alerts()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.alerts()


@contextmanager
def receiver() -> Iterator[tuple[Receiver, str]]:
    """A receiver on 127.0.0.1 and its URL (the path is the secret part, as Slack's is)."""
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            if self.path == got.path:
                with got._lock:
                    got.bodies.append(json.loads(self.rfile.read(size)))
            self.send_response(got.status if self.path == got.path else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got, f"http://127.0.0.1:{server.server_address[1]}{got.path}"
    finally:
        server.shutdown()
        server.server_close()


def rows(start: int, n: int, *, bad: bool = False) -> list[dict[str, Any]]:
    """Users `start` .. `start + n - 1`, one a second; `bad`: payloads that are not JSON."""
    out = []
    for i in range(start, start + n):
        payload = f'{{"plan": "plan-{TOKEN}-{i}", ' if bad else json.dumps(
            {"plan": f"plan-{TOKEN}-{i}", "tier": f"tier-{TOKEN}"})
        out.append({"updated_at": T0 + timedelta(seconds=i),
                    "external_id": f"user-{TOKEN}-{i:06d}", "payload": payload})
    return out


SCENARIO: list[tuple[int, bool, list[tuple[str, str]]]] = [
    *[(NORMAL, False, [])] * 5,
    (SMALL, False, [("volume", "raised")]),
    (NORMAL, False, [("volume", "cleared")]),
    (50, True, [("failed", "raised")]),
    (NORMAL, False, [("failed", "cleared")]),
]
"""(rows inserted before the run, rejected, the alerts that run delivers)."""


def play(wh: Warehouse, sync: Callable[[], object],
         seen: Callable[[int], list[tuple[str, str]]]) -> None:
    """Each step of `SCENARIO`: insert its rows, run, and check the alerts seen so far (`seen`
    waits for at least that many)."""
    start, expected = 0, []
    for n, bad, alerts in SCENARIO:
        wh.insert("users_sync", rows(start, n, bad=bad))
        wh.engine.dispose()  # the run opens the DuckDB file itself
        start += n
        sync()
        expected += alerts
        assert seen(len(expected)) == expected, (start, n)
