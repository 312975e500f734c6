"""Everything one sandbox instance knows, and its request log: what the API handlers write
and the control plane (`control`) reads. Plain state, no HTTP.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

from engage_sandbox.state.counters import Counters
from engage_sandbox.state.faults import FaultBook, FaultRule, parse_rules
from engage_sandbox.state.ratelimit import RateLimiter
from engage_sandbox.state.seed import Seed
from engage_sandbox.state.settings import SandboxSettings
from engage_sandbox.state.store import ProfileStore

LOGGED_HEADERS = (
    "content-type",
    "content-length",
    "x-braze-bulk",
    "x-request-origin",
    "user-agent",
    "idempotency-key",
)


class RequestLog:
    """The most recent API requests, oldest first, numbered from 1 since the last reset."""

    def __init__(self, capacity: int) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._seq = itertools.count(1)

    def clear(self) -> None:
        """Forget all entries and restart numbering."""
        self._entries.clear()
        self._seq = itertools.count(1)

    def start(
        self, method: str, path: str, query: str, headers: dict[bytes, bytes], received_at: float
    ) -> dict[str, Any]:
        """Append and return a new entry; the caller fills in status, body and fault."""
        entry: dict[str, Any] = {
            "seq": next(self._seq),
            "method": method,
            "path": path,
            "query": query,
            "status": None,
            "received_at": received_at,
            "headers": {
                name: headers[name.encode()].decode("latin-1")
                for name in LOGGED_HEADERS
                if name.encode() in headers
            },
            "fault": None,
        }
        self._entries.append(entry)
        return entry

    def entries(self, path: str | None = None) -> list[dict[str, Any]]:
        """Entries, optionally only those for ``path``."""
        return [e for e in self._entries if path is None or e["path"] == path]



class SandboxState:
    """Everything one sandbox instance knows. Reachable as ``request.app.state.sandbox``.

    ``extra`` is free-form per-module state (key it by module); ``reset()`` clears it and
    runs the hooks registered with ``on_reset``. ``seed`` and ``settings`` never change.
    """

    def __init__(self, settings: SandboxSettings, seed: Seed) -> None:
        self.settings = settings
        self.seed = seed
        self.store = ProfileStore()
        self.counters = Counters()
        self.log = RequestLog(settings.log_capacity)
        self.limiter = RateLimiter(settings)
        self.initial_faults: list[FaultRule] = parse_rules(settings.faults)
        self.faults = FaultBook(self.initial_faults)
        self.extra: dict[str, Any] = {}
        self._reset_hooks: list[Callable[[], None]] = []

    def on_reset(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` at every reset (after the core state is cleared)."""
        self._reset_hooks.append(hook)

    def reset(self) -> None:
        """Clear store, request log, counters, fault rules and numbering, rate windows."""
        self.store.clear()
        self.counters = Counters()
        self.log.clear()
        self.limiter.reset()
        self.faults.reset()
        self.extra.clear()
        for hook in self._reset_hooks:
            hook()
