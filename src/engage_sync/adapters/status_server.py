"""`engage-sync status-server`: the service's job sync status endpoint, served from engage-sync's
state database, so tools written for the service's endpoint work against engage-sync unchanged.

`GET /cdi/integrations/{integration_id}/job_sync_status[?cursor=C]` answers as the service does
(spec: "GET /cdi/integrations/{integration_id}/job_sync_status" and "Errors" item 3):

- 200 `{"results": [...], "message": "success"}`, 10 records a page, newest first, each record
  holding the service's six fields and the run's billed data points (sent, saved);
- `Link: <url?cursor=…>; rel="prev", <url?cursor=…>; rel="next"`, absent when the integration
  has 10 or fewer records, no `prev` on a call without cursor, no `next` on the last page;
- 400 `{"message": "Invalid cursor"}` and 400 `{"message": "Invalid integration ID"}` (an id
  that is neither an integration file of the config folder nor a name with recorded runs).

`GET /cdi/integrations[?cursor=C]`: the integration files of the config folder as the service
lists its integrations (`status.integrations`: id, name, type, status, warehouse type, the last
run's start, status and last timestamp synced), 10 a page with the same Link and cursor rules.

`POST /cdi/integrations/{integration_id}/sync`: a run of that file in a thread (`sync_starter`):
202 `{"message": "success"}`; 429 `Another job is in progress` while one runs here or under a
live lease elsewhere; 404 `Integration not found` (no file); 400 `Invalid integration ID`.

`GET /integrations/{integration_id}/trace?key=K`: one row's traced runs (`trace_endpoint`).

`GET /metrics`: the records as Prometheus counters per integration and the time of the last
successful run (`status.metrics`), behind the same token (Prometheus' `authorization`).

With a config folder, a thread checks the freshness alerts of its files
(`adapters/freshness_watch.py`).

Every request needs `Authorization: Bearer <token>`, the token being the value of
`ENGAGE_SYNC_STATUS_TOKEN` (401 otherwise). The server binds 127.0.0.1 unless told otherwise.

`serve` runs it in the foreground until SIGINT (Ctrl-C) or SIGTERM: the server stops taking
requests, the runs it started are asked to stop (resumable, as `engage-sync run` stops on
SIGTERM), its port is closed, and it says so in one line. A port in use is a ConfigError before
anything is served.

The handlers are plain functions, so Starlette runs each in its thread pool: they wait on the
state database, and as coroutines they held the event loop while they did, so the server
answered one request at a time on one connection.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sync.adapters import dbt_webhook, freshness_watch
from engage_sync.adapters.sync_starter import Sync, SyncStarter
from engage_sync.adapters.trace_endpoint import trace_route
from engage_sync.adapters.wiring import sync_file
from engage_sync.errors import ConfigError, SyncError
from engage_sync.run.stop import StopRequest
from engage_sync.state.store import StateStore
from engage_sync.status.integrations import files_by_id, integrations_page
from engage_sync.status.metrics import render
from engage_sync.status.record import InvalidCursor, StatusPage, page

TOKEN_ENV = "ENGAGE_SYNC_STATUS_TOKEN"
PATH = "/cdi/integrations/{integration_id}/job_sync_status"
LIST_PATH = "/cdi/integrations"
SYNC_PATH = "/cdi/integrations/{integration_id}/sync"
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GRACEFUL_STOP = 3  # seconds requests in flight get to finish once the server is told to stop
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def _json(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def _message(text: str, status: int = 400) -> Response:
    return _json({"message": text}, status)


def token_from_env() -> str:
    """The bearer token the server accepts; raises ConfigError when the variable is unset."""
    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        raise ConfigError(
            f"set {TOKEN_ENV} to a secret of at least 16 characters; clients send it as "
            f"'Authorization: Bearer <token>' (generate one with: python -c "
            f"'import secrets; print(secrets.token_urlsafe(32))')")
    return token


class _Endpoints:
    """The handlers over one store, token, config folder and sync starter."""

    def __init__(self, store: StateStore, token: str, folder: Path | None,
                 starter: SyncStarter) -> None:
        self.store = store
        self.expected = f"Bearer {token}".encode()
        self.folder = folder
        self.starter = starter

    def refused(self, request: Request) -> Response | None:
        """401 unless the request carries the token."""
        given = request.headers.get("authorization", "").encode()
        if hmac.compare_digest(given, self.expected):
            return None
        return _json({"message": "Unauthorized: send 'Authorization: Bearer <token>'"},
                     401, headers={"WWW-Authenticate": "Bearer"})

    def file_of(self, integration_id: str) -> Path | None:
        """The integration file of a well-formed id in the config folder, if there is one."""
        if self.folder is None or not _ID.match(integration_id):
            return None
        return files_by_id(self.folder).get(integration_id)

    def known(self, integration_id: str) -> bool:
        if not _ID.match(integration_id):
            return False
        return self.store.count_runs(integration_id) > 0 or self.file_of(integration_id) is not None

    def job_sync_status(self, request: Request) -> Response:
        if (no := self.refused(request)) is not None:
            return no
        integration_id = request.path_params["integration_id"]
        if not self.known(integration_id):
            return _message("Invalid integration ID")
        try:
            result = page(self.store, integration_id, request.query_params.get("cursor"),
                          extended=False)
        except InvalidCursor:
            return _message("Invalid cursor")
        return _paged(request, result)

    def integrations(self, request: Request) -> Response:
        if (no := self.refused(request)) is not None:
            return no
        if self.folder is None:
            return _json(StatusPage([], None, None).body())
        try:
            result = integrations_page(self.store, self.folder,
                                       request.query_params.get("cursor"))
        except InvalidCursor:
            return _message("Invalid cursor")
        return _paged(request, result)

    def sync(self, request: Request) -> Response:
        if (no := self.refused(request)) is not None:
            return no
        integration_id = request.path_params["integration_id"]
        if not _ID.match(integration_id):
            return _message("Invalid integration ID")
        path = self.file_of(integration_id)
        if path is None:
            return _message("Integration not found", 404)
        if not self.starter.start(integration_id, path):
            return _message("Another job is in progress", 429)
        return _json({"message": "success"}, 202)

    def metrics(self, request: Request) -> Response:
        if (no := self.refused(request)) is not None:
            return no
        return Response(render(self.store.run_totals()), media_type=METRICS_TYPE)


def _paged(request: Request, result: StatusPage) -> Response:
    link = result.link_header(str(request.url.replace(query="")))
    return _json(result.body(), headers={"Link": link} if link else None)


class _InFlight:
    """The sync the starter calls, counting the runs in progress so that the server's stop
    can wait for them to end."""

    def __init__(self, sync: Sync) -> None:
        self.sync = sync
        self._count = 0
        self._changed = threading.Condition()

    def __call__(self, path: Path) -> object:
        with self._changed:
            self._count += 1
        try:
            return self.sync(path)
        finally:
            with self._changed:
                self._count -= 1
                self._changed.notify_all()

    def ended(self, timeout: float) -> bool:
        """Whether no run is in progress, waiting up to `timeout` seconds for it."""
        with self._changed:
            return self._changed.wait_for(lambda: self._count == 0, timeout)


def create_app(store: StateStore, token: str, config_dir: str | Path | None = None,
               sync: Sync | None = None) -> Starlette:
    """The status app over one state store. `config_dir`: the integration files listed and
    started (one without runs answers job_sync_status with an empty page, not `Invalid
    integration ID`). `sync` runs one file (default `wiring.sync_file` on this store, stopped
    by `app.state.stop` once it is set); the starter is `app.state.starter`."""
    stop = StopRequest()
    runs = _InFlight(sync or (lambda path: sync_file(path, store=store, stop=stop)))
    starter = SyncStarter(store, runs)
    e = _Endpoints(store, token, Path(config_dir) if config_dir else None, starter)
    webhook = dbt_webhook.from_env(e.folder, starter)  # signed by dbt Cloud, not the token
    app = Starlette(routes=[Route(PATH, e.job_sync_status, methods=["GET"]),
                            Route(LIST_PATH, e.integrations, methods=["GET"]),
                            Route(SYNC_PATH, e.sync, methods=["POST"]),
                            Route("/metrics", e.metrics, methods=["GET"]),
                            trace_route(store, e.refused, e.known),  # `engage-sync trace`
                            *([Route(dbt_webhook.PATH, webhook.handle, methods=["POST"])]
                              if webhook is not None else [])])
    app.state.starter = starter
    app.state.stop = stop
    app.state.runs = runs
    app.state.freshness = freshness_watch.start(store, e.folder)  # fresh_within, watched
    return app


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; a ConfigError saying so when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family)  # SO_REUSEADDR on POSIX
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"status server: {host}:{port} is already in use (a status "
                              "server still running? stop it, or pass another --port)") from None
        raise ConfigError(f"status server: cannot listen on {host}:{port}: "
                          f"{exc.strerror or exc}") from None
    return sock


def serve(store_factory: Callable[[], StateStore], *, host: str = "127.0.0.1", port: int = 8788,
          config_dir: str | None = None, log_level: str = "info") -> None:
    """Serve in the foreground until SIGINT or SIGTERM; print one line when it serves and one
    when it has stopped: its port closed and the runs it started stopped (a run stops within
    its attempt timeout + 5 s; one not yet watching the stop ends with the process, as in a
    crash, which its journal makes safe). A second signal stops at once.

    uvicorn serves from a thread so that the signals are handled here: in the main thread it
    raises them again after its shutdown, a KeyboardInterrupt traceback or a process killed
    before the runs it started stopped."""
    import uvicorn

    app = create_app(store_factory(), token_from_env(), config_dir)
    sock = _bind(host, port)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, lifespan="off",
                                           timeout_graceful_shutdown=GRACEFUL_STOP))
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # its start and stop lines
    stop: StopRequest = app.state.stop
    received: list[str] = []

    def handle(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)
        server.force_exit = server.should_exit  # a second signal: no graceful wait
        server.should_exit = True
        stop.set(received[0])  # the runs stop taking batches now, while the server closes

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="status-server", daemon=True)
    where = f"{host}:{sock.getsockname()[1]}"
    print(f"engage-sync status-server: listening on http://{where} "
          "(Ctrl-C or SIGTERM stops it)", flush=True)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.5)
        sock.close()
        _wait_for_runs(app, received, time.monotonic() + (stop.grace or 0.0))
    finally:
        sock.close()
        if app.state.freshness is not None:
            app.state.freshness.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not received:
        raise SyncError(f"status server on {where} ended without being stopped")
    print(f"engage-sync status-server: stopped by {received[0]}; {where} is free", flush=True)


def _wait_for_runs(app: Starlette, received: list[str], deadline: float) -> None:
    """Runs in flight settle, then their threads (a stopped run's last line) end, by
    `deadline`; a second signal ends the wait."""
    while len(received) < 2 and not app.state.runs.ended(0.2) and time.monotonic() < deadline:
        pass
    if len(received) < 2:
        app.state.starter.join(max(1.0, deadline - time.monotonic()))
