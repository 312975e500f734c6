"""When a request is sent again, and how long before: the delivery layer's retry policy (DESIGN
rule 6: it is the only retry owner), through tenacity.

``retry`` outcomes are retried until the deadline; ``in_doubt`` ones only when
`request.resend_in_doubt`; ``ok``, ``failed`` and ``fatal`` are final, and so is everything
once the deliverer met a ``fatal`` outcome. Waits grow exponentially with jitter and never
undercut the service's own floor: `X-RateLimit-Reset` after a 429 (which also pauses the rate
budget for everyone sharing it) or `Retry-After`. Retrying stops when the next wait would end
past the request's deadline, and a retryable outcome still standing then says so in its
reason: ``failed`` when no attempt may have been processed, else ``in_doubt``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from tenacity import RetryCallState, Retrying, wait_exponential
from tenacity.wait import wait_base

from engage_sync.deliver.classify import Outcome
from engage_sync.deliver.rate_headers import parse_reset, parse_retry_after
from engage_sync.deliver.ratelimit import Clock, RateBudget, Sleep
from engage_sync.pack.request import Request

RETRYABLE = frozenset({"retry", "in_doubt"})


class Jitter(wait_base):
    """Up to `high` seconds at random, drawn from a generator of our own: retries run in send
    threads, and the global generator is the application's to seed and draw (tenacity's
    `wait_random` draws from it)."""

    def __init__(self, high: float) -> None:
        self.high, self._random = high, random.Random()

    def __call__(self, retry_state: RetryCallState) -> float:
        return self._random.uniform(0, self.high)


@dataclass(slots=True)
class Attempt:
    outcome: Outcome
    floor: float  # the service's own minimum wait before the next attempt, in seconds


@dataclass(slots=True)
class SendState:
    """Per-call state, passed through tenacity as the attempted function's argument."""

    request: Request
    budget: RateBudget
    give_up_at: float
    attempts: int = 0
    doubtful: int = 0
    replay: Attempt | None = None


class RetryPolicy:
    """The retry decisions and waits of one deliverer. `halted` says whether the deliverer met
    a fatal outcome (nothing is retried then); `log` and `service` name the warning line of
    each retry. Thread-safe: it keeps no state of a call but in its `SendState`."""

    def __init__(self, *, deadline: float, backoff_initial: float, backoff_max: float,
                 sleep: Sleep, clock: Clock, wall: Clock, halted: Callable[[], bool],
                 log: logging.LoggerAdapter[logging.Logger], service: str) -> None:
        self.deadline = deadline
        self._clock, self._wall, self._halted = clock, wall, halted
        self._log, self._service = log, service
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

    def start(self, request: Request, budget: RateBudget) -> SendState:
        """A call's state, its deadline counted from now."""
        return SendState(request, budget, self._clock() + self.deadline)

    def retryable(self, state: SendState, attempt: Attempt) -> bool:
        kind = attempt.outcome.kind
        if self._halted():
            return False
        return kind == "retry" or (kind == "in_doubt" and state.request.resend_in_doubt)

    def retry(self, state: SendState, first: Attempt,
              attempt: Callable[[SendState], Attempt]) -> Attempt:
        """The last of the attempts after `first`. `first` was made before tenacity, so the
        common case (answered at once) pays nothing for it; tenacity replays it as its first
        attempt."""
        state.replay = first
        return self._retrying(self._replay_or_attempt, state, attempt)

    @staticmethod
    def _replay_or_attempt(state: SendState, attempt: Callable[[SendState], Attempt]
                           ) -> Attempt:
        if state.replay is not None:
            first, state.replay = state.replay, None
            return first
        return attempt(state)

    def floor(self, outcome: Outcome, headers: Mapping[str, str], budget: RateBudget) -> float:
        """The service's own minimum wait before the next attempt (0.0 for a final outcome);
        after a 429, the budget is paused for as long."""
        if outcome.kind not in RETRYABLE:
            return 0.0
        now = self._wall()
        floor = parse_retry_after(headers, now) or 0.0
        if outcome.status == 429:
            reset = parse_reset(headers, now)
            floor = max(floor, reset - now) if reset is not None else floor
            # everyone sharing the budget waits, not just us; and it keeps to its sliding log
            # from now on, even when the reset has passed (an edge misjudged)
            budget.pause_until(now + floor)
        return floor

    def final(self, state: SendState, outcome: Outcome) -> Outcome:
        """A retryable outcome still standing when retrying stopped: say so, and how it ends."""
        gave_up_doubt = outcome.kind == "in_doubt" and state.request.resend_in_doubt
        if outcome.kind != "retry" and not gave_up_doubt:
            return outcome
        why = "stopped by a fatal error" if self._halted() else "deadline reached"
        attempts = f"{state.attempts} attempt{'' if state.attempts == 1 else 's'}"
        gave_up = f"gave up after {attempts} ({why}): {outcome.reason}"
        if gave_up_doubt:
            return replace(outcome, reason=gave_up)
        if state.doubtful:
            # An earlier attempt may have been processed: failing the items would be a lie.
            return replace(outcome, kind="in_doubt", reason=f"{gave_up}; an earlier attempt "
                           "may have been processed")
        return replace(outcome, kind="failed", reason=gave_up)

    # --- tenacity's hooks -------------------------------------------------------------------

    def _wants_retry(self, rs: RetryCallState) -> bool:
        return self.retryable(rs.args[0], _last_result(rs))

    def _wait(self, rs: RetryCallState) -> float:
        return max(self._backoff(rs), _last_result(rs).floor)

    def _stop(self, rs: RetryCallState) -> bool:
        state: SendState = rs.args[0]
        return self._clock() + rs.upcoming_sleep > state.give_up_at

    def _warn(self, rs: RetryCallState) -> None:
        state: SendState = rs.args[0]
        attempt = _last_result(rs)
        self._log.warning(
            "%s: POST %s: %s; retrying in %.2f s (attempt %d, %d items)", self._service,
            state.request.endpoint, attempt.outcome.reason, rs.upcoming_sleep, state.attempts,
            len(state.request.items),
        )


def _last_result(rs: RetryCallState) -> Attempt:
    return rs.outcome.result()  # type: ignore[union-attr]
