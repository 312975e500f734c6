"""Send requests to the service: rate budget, HTTP, classify, retry what is safe.

The delivery layer is the only retry owner (DESIGN rule 6). Per attempt: take a slot of the
endpoint group's shared budget, POST, let the budget read the rate-limit headers, `classify`.
Then tenacity decides: ``retry`` outcomes are retried until the deadline; ``in_doubt`` ones
only when `request.resend_in_doubt`; ``ok``, ``failed`` and ``fatal`` are final. Waits grow
exponentially with jitter and never undercut `X-RateLimit-Reset` (after a 429) or `Retry-After`.

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
import random
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, wait_exponential
from tenacity.wait import wait_base

from engage_sync import __version__
from engage_sync.deliver.classify import Outcome, classify
from engage_sync.deliver.lean_transport import LeanAnswer, LeanTransport, Prepared
from engage_sync.deliver.ratelimit import (
    Clock,
    RateBudget,
    RateBudgets,
    Sleep,
    parse_reset,
    parse_retry_after,
)
from engage_sync.errors import RateBudgetUnavailable
from engage_sync.pack.request import Request

logger = logging.getLogger(__name__)


class Jitter(wait_base):
    """Up to `high` seconds at random, drawn from a generator of our own: retries run in send
    threads, and the global generator is the application's to seed and draw (tenacity's
    `wait_random` draws from it)."""

    def __init__(self, high: float) -> None:
        self.high, self._random = high, random.Random()

    def __call__(self, retry_state: RetryCallState) -> float:
        return self._random.uniform(0, self.high)


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


@dataclass(slots=True)
class _Attempt:
    outcome: Outcome
    floor: float  # the service's own minimum wait before the next attempt, in seconds


@dataclass(slots=True)
class _Send:
    """Per-call state, passed through tenacity as the attempted function's argument."""

    request: Request
    budget: RateBudget
    give_up_at: float
    attempts: int = 0
    doubtful: int = 0
    replay: _Attempt | None = None


_RETRYABLE = frozenset({"retry", "in_doubt"})


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
        self._deadline = retry_deadline
        self._clock, self._wall = clock, wall
        self._log = DeliveryLog(logger, dict(log_context or {}))
        self._fatal: Outcome | None = None
        self._budget_lost: str | None = None  # why the shared rate budget was lost, if it was
        self._lost_as: type[RateBudgetUnavailable] = RateBudgetUnavailable  # or LeaseLost
        self._budget_cache: dict[str, RateBudget] = {}
        self._headers = {"Authorization": f"Bearer {api_key}",
                         "Content-Type": "application/json", "User-Agent": USER_AGENT}
        self._bulk_headers = {**self._headers, "X-Braze-Bulk": "true"}
        self._backoff = (wait_exponential(multiplier=backoff_initial, max=backoff_max)
                         + Jitter(backoff_initial))
        self._retrying = Retrying(
            sleep=sleep,
            retry=self._wants_retry,
            wait=self._wait,
            stop=self._stop,
            before_sleep=self._warn,
            retry_error_callback=_last_result,
        )

    def __repr__(self) -> str:
        return f"Deliverer(base_url={self._base!r}, retry_deadline={self._deadline:g})"

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
        state = _Send(request, self._budget(request.group), self._clock() + self._deadline)
        try:
            last = self._attempt(state)
            if self._retryable(state, last):
                # The first attempt is made before tenacity, so the common case (answered at
                # once) pays nothing for it; tenacity replays it as its first attempt.
                state.replay = last
                last = self._retrying(self._replay_or_attempt, state)
        except RateBudgetUnavailable as exc:
            self._budget_lost, self._lost_as = str(exc), type(exc)
            if not state.doubtful:
                raise  # this request never left: the caller stops the run, nothing settled
            reason = f"{exc}; an earlier attempt may have been processed"
            last = _Attempt(Outcome("in_doubt", reason), 0.0)
        else:
            last = _Attempt(self._final(state, last.outcome), last.floor)
        self._tell(request, last.outcome)
        return Delivery(last.outcome, state.attempts, state.doubtful)

    # --- one attempt ------------------------------------------------------------------------

    def _replay_or_attempt(self, state: _Send) -> _Attempt:
        if state.replay is not None:
            attempt, state.replay = state.replay, None
            return attempt
        return self._attempt(state)

    def _attempt(self, state: _Send) -> _Attempt:
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
            if outcome.kind in _RETRYABLE:
                floor = self._floor(outcome, response.headers, state.budget)
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
        return _Attempt(outcome, floor)

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

    def _floor(self, outcome: Outcome, headers: Mapping[str, str], budget: RateBudget
               ) -> float:
        now = self._wall()
        floor = parse_retry_after(headers, now) or 0.0
        if outcome.status == 429:
            reset = parse_reset(headers, now)
            floor = max(floor, reset - now) if reset is not None else floor
            # everyone sharing the budget waits, not just us; and it keeps to its sliding log
            # from now on, even when the reset has passed (an edge misjudged)
            budget.pause_until(now + floor)
        return floor

    def _budget(self, group: str) -> RateBudget:
        found = self._budget_cache.get(group)
        if found is None:
            found = self._budget_cache.setdefault(group, self._budgets.budget(self._base, group))
        return found

    # --- tenacity policy --------------------------------------------------------------------

    def _retryable(self, state: _Send, attempt: _Attempt) -> bool:
        kind = attempt.outcome.kind
        if self._fatal is not None:
            return False
        return kind == "retry" or (kind == "in_doubt" and state.request.resend_in_doubt)

    def _wants_retry(self, rs: RetryCallState) -> bool:
        return self._retryable(rs.args[0], _last_result(rs))

    def _wait(self, rs: RetryCallState) -> float:
        return max(self._backoff(rs), _last_result(rs).floor)

    def _stop(self, rs: RetryCallState) -> bool:
        state: _Send = rs.args[0]
        return self._clock() + rs.upcoming_sleep > state.give_up_at

    def _warn(self, rs: RetryCallState) -> None:
        state: _Send = rs.args[0]
        attempt = _last_result(rs)
        self._log.warning(
            "%s: POST %s: %s; retrying in %.2f s (attempt %d, %d items)", self._service,
            state.request.endpoint, attempt.outcome.reason, rs.upcoming_sleep, state.attempts,
            len(state.request.items),
        )

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

    def _final(self, state: _Send, outcome: Outcome) -> Outcome:
        """A retryable outcome still standing when retrying stopped: say so, and how it ends."""
        gave_up_doubt = outcome.kind == "in_doubt" and state.request.resend_in_doubt
        if outcome.kind != "retry" and not gave_up_doubt:
            return outcome
        why = "stopped by a fatal error" if self._fatal is not None else "deadline reached"
        attempts = f"{state.attempts} attempt{'' if state.attempts == 1 else 's'}"
        gave_up = f"gave up after {attempts} ({why}): {outcome.reason}"
        if gave_up_doubt:
            return replace(outcome, reason=gave_up)
        if state.doubtful:
            # An earlier attempt may have been processed: failing the items would be a lie.
            return replace(outcome, kind="in_doubt", reason=f"{gave_up}; an earlier attempt "
                           "may have been processed")
        return replace(outcome, kind="failed", reason=gave_up)


def _shown(base: str) -> str:
    """The service's URL for a log line: no user, password or query."""
    try:
        return str(httpx.URL(base).copy_with(userinfo=b"", query=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "its base URL"


def _last_result(rs: RetryCallState) -> _Attempt:
    return rs.outcome.result()  # type: ignore[union-attr]

