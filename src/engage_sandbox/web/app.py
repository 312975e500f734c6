"""The sandbox application: shared state, the gate every API request passes, and the routes.

Order of the gate for a path of the spec's permission table: count and log the request →
authenticate (401/403) → rate limit (429) → scripted fault → body checks for POST/PUT
(415, 413, 400 parse) → handler. Every answer of the gate or a handler carries the
X-RateLimit-* headers of the endpoint's group. Paths outside the table (the control plane,
unknown paths) go straight to the router.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from engage_sandbox.handlers import control, dashboard, identity, messaging, scim, subscriptions
from engage_sandbox.handlers.lean import handle_track_lean
from engage_sandbox.handlers.outcome import Outcome
from engage_sandbox.handlers.track import handle_track
from engage_sandbox.state.dashboard_seed import attribute_definitions
from engage_sandbox.state.faults import FaultRule
from engage_sandbox.state.ratelimit import Verdict
from engage_sandbox.state.seed import load_seed
from engage_sandbox.state.settings import SandboxSettings
from engage_sandbox.state.state import SandboxState
from engage_sandbox.web.auth import Endpoint, check_auth, match_endpoint

PARSE_ERROR = "Error while parsing request body..."
TOO_LARGE = "Request Entity Too Large"
UNSUPPORTED = "Unsupported Media Type: send 'Content-Type: application/json'"
RATE_LIMITED = "Rate limit exceeded"
FAULT_MESSAGES = {
    429: RATE_LIMITED,
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class DroppedConnection(Exception):
    """Raised for a ``drop`` fault when the server gives no transport to close."""


def _json_bytes(status: int, body: Any, extra: list[tuple[bytes, bytes]]) -> tuple[Message, ...]:
    payload = orjson.dumps(body)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        *extra,
    ]
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": payload},
    )


def _abort_connection(send: Send) -> bool:
    """Close the client connection without an answer (uvicorn's cycle exposes the transport)."""
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        return False
    cycle.disconnected = True  # type: ignore[union-attr]  # uvicorn: no 500, no error log
    transport.close()
    return True


# Sends a JSON answer (status, body, verdict) for the request at hand: :func:`_answer` bound.
Answer = Callable[[int, Any, Verdict], Awaitable[None]]


async def _answer(
    send: Send, entry: dict[str, Any], status: int, body: Any, verdict: Verdict
) -> None:
    """Send a JSON answer with the verdict's rate headers and note its status in ``entry``."""
    entry["status"] = status
    for message in _json_bytes(status, body, verdict.headers()):
        await send(message)


async def _fault_before(
    rule: FaultRule, entry: dict[str, Any], verdict: Verdict, answer: Answer
) -> bool:
    """The part of a scripted fault that acts before the handler; True when it has answered.

    A delay waits; a status fault without ``process`` answers now (a 429 with no remaining
    calls); a drop or a processed status fault waits for :func:`_fault_after`.
    """
    entry["fault"] = rule.action
    if rule.action == "delay":
        await asyncio.sleep(rule.delay_seconds)
    elif rule.action != "drop":
        status = int(rule.action)
        if not rule.process:
            fault_verdict = Verdict(True, verdict.limit, 0, verdict.reset)
            await answer(
                status, {"message": FAULT_MESSAGES[status]},
                fault_verdict if status == 429 else verdict,
            )
            return True
    return False


async def _fault_after(
    rule: FaultRule, scope: Scope, send: Send, verdict: Verdict, answer: Answer
) -> None:
    """After the (silenced) handler: drop the connection, or answer the fault's status."""
    if rule.action == "drop":
        if not _abort_connection(send):
            raise DroppedConnection(f"sandbox fault: dropped {scope['method']} {scope['path']}")
    else:
        status = int(rule.action)
        await answer(status, {"message": FAULT_MESSAGES[status]}, verdict)


class SandboxApp(Starlette):
    """Starlette with the sandbox gate in front of the router (see the module docstring)."""

    sandbox: SandboxState

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            endpoint = match_endpoint(scope["method"], scope["path"])
            if endpoint is not None:
                await self._gate(scope, receive, send, endpoint)
                return
        await super().__call__(scope, receive, send)

    async def _gate(self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint) -> None:
        state = self.sandbox
        headers = dict(scope["headers"])
        entry = self._count_and_log(scope, headers)
        answer = functools.partial(_answer, send, entry)
        verdict = await self._admit(endpoint, scope["path"], headers, answer)
        if verdict is None:
            return
        _, rule = state.faults.next(scope["path"])
        if rule is not None and await _fault_before(rule, entry, verdict, answer):
            return
        body: Any = None
        if scope["method"] in BODY_METHODS:
            checked = await self._read_json(headers, receive, state.settings.max_body_bytes)
            if isinstance(checked, Outcome):
                await answer(checked.status, checked.body, verdict)
                return
            body = checked[0]
            if not state.settings.lean:
                entry["body"] = body
        # A drop or a processed status fault silences the handler and acts after it.
        deferred = rule if rule is not None and rule.action != "delay" else None
        await self._handle(scope, send, endpoint, body, verdict, entry, deferred is not None)
        if deferred is not None:
            await _fault_after(deferred, scope, send, verdict, answer)

    def _count_and_log(self, scope: Scope, headers: dict[bytes, bytes]) -> dict[str, Any]:
        """Count the request under its path and open its request log entry."""
        state = self.sandbox
        path, method = scope["path"], scope["method"]
        state.counters.requests[path] += 1
        return state.log.start(
            method, path, scope.get("query_string", b"").decode("latin-1"), headers, time.time()
        )

    async def _admit(
        self, endpoint: Endpoint, path: str, headers: dict[bytes, bytes], answer: Answer
    ) -> Verdict | None:
        """Authenticate, then rate limit: the rate verdict, or None once 401/403/429 is sent."""
        state = self.sandbox
        denied = check_auth(endpoint, headers, state.seed)
        if denied is not None:
            await answer(*denied, state.limiter.check(endpoint.group, path, consume=False))
            return None
        verdict = state.limiter.check(endpoint.group, path)
        if not verdict.allowed:
            await answer(429, {"message": RATE_LIMITED}, verdict)
            return None
        return verdict

    async def _handle(
        self,
        scope: Scope,
        send: Send,
        endpoint: Endpoint,
        body: Any,
        verdict: Verdict,
        entry: dict[str, Any],
        quiet: bool,
    ) -> None:
        """Answer with the lean /users/track counter or the router; send nothing if ``quiet``."""
        state = self.sandbox
        if state.settings.lean and endpoint.group == "users_track":
            outcome = handle_track_lean(body, state.settings, state.counters)
            entry["status"] = outcome.status
            if not quiet:
                await _answer(send, entry, outcome.status, outcome.body, verdict)
        else:
            await self._downstream(scope, send, body, verdict, entry, quiet)

    @staticmethod
    async def _read_json(
        headers: dict[bytes, bytes], receive: Receive, limit: int
    ) -> tuple[Any] | Outcome:
        """The parsed JSON body (in a 1-tuple), or the 415/413/400 outcome."""
        ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if ctype != b"application/json":
            return Outcome(415, {"message": UNSUPPORTED})
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return Outcome(413, {"message": TOO_LARGE})
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return Outcome(413, {"message": TOO_LARGE})
            chunks.append(chunk)
            more = message.get("more_body", False)
        try:
            return (orjson.loads(b"".join(chunks)),)
        except orjson.JSONDecodeError:
            return Outcome(400, {"message": PARSE_ERROR, "errors": [PARSE_ERROR]})

    async def _downstream(
        self,
        scope: Scope,
        send: Send,
        body: Any,
        verdict: Verdict,
        entry: dict[str, Any],
        quiet: bool,
    ) -> None:
        """Run the router with the body replayed; add rate headers; swallow if ``quiet``."""
        scope.setdefault("state", {})["json_body"] = body
        payload = orjson.dumps(body) if body is not None else b""
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.sleep(3600)  # a handler never waits for a disconnect here
            return {"type": "http.disconnect"}

        async def tagged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), *verdict.headers()]}
            if not quiet:
                await send(message)

        await super().__call__(scope, replay, tagged_send)


# ---- core API routes -------------------------------------------------------------------------


def _handler(
    run: Callable[[Any, SandboxState], Outcome],
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        state: SandboxState = request.app.state.sandbox
        outcome = run(request.state.json_body, state)
        return control.json_response(outcome.body, outcome.status)

    return endpoint


def core_routes() -> list[Route]:
    """Routes of the endpoints written in this package's core modules."""
    table: list[tuple[str, Callable[[Any, SandboxState], Outcome]]] = [
        ("/users/track", lambda b, s: handle_track(b, s.settings, s.store, s.counters,
                                                   attribute_definitions(s))),
        ("/subscription/status/set", lambda b, s: subscriptions.handle_v1(b, s.store)),
        ("/v2/subscription/status/set", lambda b, s: subscriptions.handle_v2(b, s.store)),
        ("/users/merge", lambda b, s: identity.handle_merge(b, s.store)),
        ("/users/delete", lambda b, s: identity.handle_delete(b, s.store)),
        ("/users/identify", lambda b, s: identity.handle_identify(b, s.store)),
        ("/users/alias/update", lambda b, s: identity.handle_alias_update(b, s.store)),
        ("/users/alias/new", lambda b, s: identity.handle_alias_new(b, s.store)),
    ]
    return [Route(path, _handler(run), methods=["POST"]) for path, run in table]


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "Internal Server Error"
    return control.json_response({"message": detail}, status)


def create_app(settings: SandboxSettings | None = None) -> Starlette:
    """A new sandbox application with its own state (``app.state.sandbox``).

    Raises :class:`engage_sandbox.state.seed.SeedError` or
    :class:`engage_sandbox.state.faults.FaultError` for a bad seed or bad initial faults.
    """
    settings = settings or SandboxSettings()
    state = SandboxState(settings, load_seed(settings.seed))
    routes = [
        *control.routes(),
        *core_routes(),
        *messaging.routes(),
        *dashboard.routes(),
        *scim.routes(),
    ]
    app = SandboxApp(routes=routes, exception_handlers={HTTPException: _http_error})
    app.sandbox = state
    app.state.sandbox = state
    return app
