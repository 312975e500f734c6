"""Send requests to the service: rate budget, HTTP, classify, retry what is safe.

The delivery layer is the only retry owner (DESIGN rule 6). Per attempt: take a slot of the
endpoint group's shared budget, POST, let the budget read the rate-limit headers, `classify`.
Then the retry policy decides whether and when to send it again (`deliver/retry_policy.py`:
tenacity, backoff floored by the service's headers, a deadline).

A shared rate budget that cannot be reached raises `RateBudgetUnavailable` out of `send` when
the request was never sent (and out of every later `send` at once, without sending); when an
earlier attempt of it may have been processed, the request ends in doubt instead.

HTTP goes straight to an httpx transport (`handle_request`), not through an `httpx.Client`: the
service needs none of the client's auth flows, redirects, cookies or event hooks, and skipping
them gives CPU back to the thread that reads and packs (`benchmarks/deliver_overhead.py`,
figures in benchmarks/README.md). On the lean transport (no proxy) it skips httpx's request
and response models too: each endpoint's head is prepared once, then each body is posted
(`LeanTransport.prepare` / `post`, the same bytes on the wire; `benchmarks/transport_cpu.py`).
Transport errors are httpx's own either way, as `classify` expects.

Secrets: the API key is held privately, sent only in the Authorization header, and scrubbed
from every reason; log lines carry the endpoint, status, attempt and item count, never the key
or the body. Thread-safe: one `Deliverer` may serve a small pool of threads sharing one
transport.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

import httpx

from engage_sync import __version__
from engage_sync.deliver.classify import Outcome, classify
from engage_sync.deliver.lean_transport import LeanAnswer, LeanTransport, Prepared
from engage_sync.deliver.ratelimit import Clock, RateBudget, RateBudgets, Sleep
from engage_sync.deliver.retry_policy import Attempt, RetryPolicy, SendState
from engage_sync.errors import RateBudgetUnavailable
from engage_sync.pack.request import Request

logger = logging.getLogger(__name__)


class DeliveryLog(logging.LoggerAdapter[logging.Logger]):
    """Prefixes delivery lines with `[integration]` when the context names one, and attaches
    the context to each record (`extra`) for structured handlers."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        kwargs.setdefault("extra", self.extra)
        name = self.extra.get("integration") if self.extra else None
        return (f"[{name}] {msg}" if name else msg), kwargs


@dataclass(frozen=True, slots=True, eq=False)
class Delivery:
    """The final outcome of one request and how it was reached.

    `doubtful_attempts` counts attempts that may have been processed without an answer; when
    it is above zero and the request was sent again, its events or purchases may be doubled.
    """

    outcome: Outcome
    attempts: int
    doubtful_attempts: int = 0


def attempt_timeout(seconds: float) -> httpx.Timeout:
    """One attempt's bound (`service.timeout_seconds`), of which connecting takes at most 10 s."""
    return httpx.Timeout(seconds, connect=min(10.0, seconds))


DEFAULT_TIMEOUT = attempt_timeout(30.0)
USER_AGENT = f"engage-sync/{__version__}"


def _check_key(api_key: str) -> None:
    """ValueError for a key that cannot be a bearer token (the error never holds the key)."""
    if not api_key or not api_key.isprintable() or api_key != api_key.strip():
        raise ValueError(
            "the API key is empty or holds spaces or control characters; "
            "check the environment variable named by service.api_key_env"
        )


class Deliverer:
    """Sends `Request`s through a caller-owned httpx transport (a keep-alive pool, closed by the
    caller) to `base_url`, each attempt bounded by `timeout`.

    After a ``fatal`` outcome (401, 403) every later
    `send` returns a ``fatal`` outcome at once with `attempts` 0, without sending: the run
    must stop, and those requests were never sent.
    Raises ValueError at construction for an empty key or one unfit for a header.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport,
        api_key: str,
        budgets: RateBudgets,
        *,
        base_url: str,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        retry_deadline: float = 600.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        sleep: Sleep = time.sleep,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        log_context: Mapping[str, object] | None = None,
        guard: Callable[[], None] | None = None,
    ) -> None:
        _check_key(api_key)
        self._transport = transport
        self._guard = guard  # raises (LeaseLost) when this process may send no more
        self._key = api_key
        self._budgets = budgets
        self._base = base_url.rstrip("/")
        if not self._base:
            raise ValueError("no base URL: check service.base_url")
        self._service = f"the service at {_shown(self._base)}"  # for log lines
        self._urls: dict[str, httpx.URL] = {}  # endpoint → its parsed URL
        self._extensions = {"timeout": timeout.as_dict()}
        self._lean = transport if isinstance(transport, LeanTransport) else None
        self._prepared: dict[tuple[str, bool], Prepared] = {}  # (endpoint, bulk) → its head
        self._clock = clock
        self._log = DeliveryLog(logger, dict(log_context or {}))
        self._fatal: Outcome | None = None
        self._budget_lost: str | None = None  # why the shared rate budget was lost, if it was
        self._lost_as: type[RateBudgetUnavailable] = RateBudgetUnavailable  # or LeaseLost
        self._budget_cache: dict[str, RateBudget] = {}
        self._headers = {"Authorization": f"Bearer {api_key}",
                         "Content-Type": "application/json", "User-Agent": USER_AGENT}
        self._bulk_headers = {**self._headers, "X-Braze-Bulk": "true"}
        self._policy = RetryPolicy(
            deadline=retry_deadline, backoff_initial=backoff_initial, backoff_max=backoff_max,
            sleep=sleep, clock=clock, wall=wall, halted=lambda: self._fatal is not None,
            log=self._log, service=self._service)

    def __repr__(self) -> str:
        return (f"Deliverer(base_url={self._base!r}, "
                f"retry_deadline={self._policy.deadline:g})")

    @property
    def fatal(self) -> Outcome | None:
        """The fatal outcome that stopped this deliverer, if any."""
        return self._fatal

    def budget_holds(self) -> bool:
        """A request waits for one of this deliverer's rate budgets now (`RateBudget.holding`;
        a budget is shared by every deliverer of the process to the same service and group)."""
        return any(budget.holding for budget in list(self._budget_cache.values()))

    def send(self, request: Request) -> Delivery:
        """Deliver one request; never raises for HTTP trouble, which becomes the outcome."""
        if self._fatal is not None:
            not_sent = f"not sent: an earlier request was refused ({self._fatal.reason})"
            return Delivery(replace(self._fatal, reason=not_sent), attempts=0)
        if self._budget_lost is not None:  # fail the requests queued behind it at once
            raise self._lost_as(self._budget_lost)
        state = self._policy.start(request, self._budget(request.group))
        try:
            last = self._attempt(state)
            if self._policy.retryable(state, last):
                last = self._policy.retry(state, last, self._attempt)
        except RateBudgetUnavailable as exc:
            self._budget_lost, self._lost_as = str(exc), type(exc)
            if not state.doubtful:
                raise  # this request never left: the caller stops the run, nothing settled
            reason = f"{exc}; an earlier attempt may have been processed"
            last = Attempt(Outcome("in_doubt", reason), 0.0)
        else:
            last = Attempt(self._policy.final(state, last.outcome), last.floor)
        self._tell(request, last.outcome)
        return Delivery(last.outcome, state.attempts, state.doubtful)

    # --- one attempt ------------------------------------------------------------------------

    def _attempt(self, state: SendState) -> Attempt:
        request = state.request
        if self._guard is not None:
            self._guard()
        state.budget.acquire()
        granted = self._clock()
        state.attempts += 1
        headers = self._bulk_headers if request.bulk else self._headers
        floor = 0.0
        try:
            response = self._post(request, headers)
        except httpx.RequestError as exc:
            outcome = classify(request, None, None, exc)
        else:
            state.budget.observe(response.headers, self._clock() - granted)
            outcome = classify(request, response.status_code, response.content, None)
            floor = self._policy.floor(outcome, response.headers, state.budget)
        if self._key in outcome.reason:  # defence in depth: classify never sees the key
            outcome = replace(outcome, reason=outcome.reason.replace(self._key, "***"))
        if outcome.kind == "in_doubt":
            state.doubtful += 1
        elif outcome.kind == "fatal":
            self._fatal = outcome
        if self._log.isEnabledFor(logging.DEBUG):
            self._log.debug(
                "POST %s -> %s %s (attempt %d, %d items)", request.endpoint,
                outcome.status if outcome.status is not None else "-", outcome.kind,
                state.attempts, len(request.items),
            )
        return Attempt(outcome, floor)

    def _post(self, request: Request, headers: Mapping[str, str]
              ) -> httpx.Response | LeanAnswer:
        """One POST through the transport; the answer read whole and its connection returned
        to the pool."""
        if self._lean is not None:
            key = (request.endpoint, request.bulk)
            prepared = self._prepared.get(key)
            if prepared is None:  # a bad header raises here, as handle_request would
                prepared = self._prepared.setdefault(
                    key, self._lean.prepare(self._base + request.endpoint, headers))
            return self._lean.post(prepared, request.body, self._extensions["timeout"])
        url = self._urls.get(request.endpoint)
        if url is None:
            url = self._urls.setdefault(request.endpoint, httpx.URL(self._base + request.endpoint))
        response = self._transport.handle_request(httpx.Request(
            "POST", url, content=request.body, headers=headers, extensions=self._extensions))
        try:
            response.read()
        finally:
            response.close()
        return response

    def _budget(self, group: str) -> RateBudget:
        found = self._budget_cache.get(group)
        if found is None:
            found = self._budget_cache.setdefault(group, self._budgets.budget(self._base, group))
        return found

    def _tell(self, request: Request, outcome: Outcome) -> None:
        """One warning line for a request that ended in doubt or failed as a whole: the
        service, what it answered, and what became of the request's rows."""
        if outcome.kind not in ("in_doubt", "failed"):
            return
        rows = f"its {len(request.items)} rows"
        if outcome.kind == "failed":
            fate = f"{rows} failed"
        elif request.resend_in_doubt:
            fate = f"{rows} are counted in doubt"
        else:
            fate = f"not sent again (in_doubt: skip): {rows} are counted in doubt"
        name = self._log.extra.get("integration") if self._log.extra else None
        listed = f"`engage-sync errors {name}`" if name else "`engage-sync errors`"
        self._log.warning("%s: POST %s: %s; %s, listed by %s", self._service,
                          request.endpoint, outcome.reason, fate, listed)


def _shown(base: str) -> str:
    """The service's URL for a log line: no user, password or query."""
    try:
        return str(httpx.URL(base).copy_with(userinfo=b"", query=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "its base URL"
