"""Deliverer against scripted httpx.MockTransport answers, on a fake clock."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest

from engage_sync.deliver.deliverer import DEFAULT_TIMEOUT, Deliverer
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.deliver.service_windows import CLOCK_SKEW
from engage_sync.items import Item
from engage_sync.pack.request import Request
from tests.fakes import EPOCH, FakeClock

KEY = "sk-test-0123456789abcdef"
BASE = "https://rest.example.test"

Answer = httpx.Response | Exception


class Script:
    """A MockTransport handler answering from a list; the last answer repeats."""

    def __init__(self, clock: FakeClock, *answers: Answer) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.seen: list[tuple[float, httpx.Request]] = []
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.seen.append((self.clock.monotonic(), request))
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def reply(status: int, body: object = None, **headers: str) -> httpx.Response:
    content = orjson.dumps(body) if body is not None else b""
    return httpx.Response(status, content=content,
                          headers={k.replace("_", "-"): v for k, v in headers.items()})


OK = reply(201, {"message": "success", "attributes_processed": 1})
UNAVAILABLE = {"message": "Service Unavailable"}  # the service's own 503: not processed


def make_request(*, resend_in_doubt: bool = True, bulk: bool = False, **arrays: int) -> Request:
    arrays = arrays or {"attributes": 1}
    items: list[Item] = []
    positions: list[tuple[str, int]] = []
    body: dict[str, list[dict[str, str]]] = {}
    for array, count in arrays.items():
        body[array] = [{"external_id": f"u{i}", "plan": "PAYLOAD-VALUE"} for i in range(count)]
        for i in range(count):
            items.append(Item(len(items), f"row{len(items)}", f"u{i}", array, b"{}"))
            positions.append((array, i))
    return Request("/users/track", "users_track", orjson.dumps(body), tuple(items),
                   tuple(positions), bulk=bulk, resend_in_doubt=resend_in_doubt)


Factory = Callable[..., tuple[Deliverer, Script, FakeClock]]


@pytest.fixture
def deliverer() -> Factory:
    def build(*answers: Answer, deadline: float = 600.0,
              budgets: RateBudgets | None = None,
              clock: FakeClock | None = None) -> tuple[Deliverer, Script, FakeClock]:
        clock = clock or FakeClock(start=0.0)
        script = Script(clock, *answers)
        budgets = budgets or RateBudgets(clock=clock.monotonic, wall=clock.time,
                                         sleep=clock.sleep)
        d = Deliverer(httpx.MockTransport(script), KEY, budgets, base_url=BASE,
                      retry_deadline=deadline, sleep=clock.sleep,
                      clock=clock.monotonic, wall=clock.time,
                      log_context={"integration": "demo_users"})
        return d, script, clock

    return build


def test_ok_first_time_with_the_right_headers(deliverer: Factory) -> None:
    d, script, _ = deliverer(OK)
    result = d.send(make_request())
    assert (result.outcome.kind, result.attempts, result.doubtful_attempts) == ("ok", 1, 0)
    sent = script.seen[0][1]
    assert sent.url == httpx.URL(BASE + "/users/track")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert "x-braze-bulk" not in sent.headers
    assert orjson.loads(sent.content)["attributes"][0]["external_id"] == "u0"
    assert sent.headers["user-agent"].startswith("engage-sync/")
    assert sent.headers["content-length"] == str(len(sent.content))
    # straight to the transport: the attempt's timeout travels with the request
    assert sent.extensions["timeout"] == DEFAULT_TIMEOUT.as_dict()


def test_bulk_requests_carry_the_bulk_header(deliverer: Factory) -> None:
    d, script, _ = deliverer(OK)
    d.send(make_request(bulk=True))
    assert script.seen[0][1].headers["x-braze-bulk"] == "true"


def test_429_waits_for_the_reset_then_succeeds(deliverer: Factory) -> None:
    clock = FakeClock(start=0.0)
    reset = str(int(clock.time()) + 7)
    d, script, _ = deliverer(
        reply(429, {"message": "rate limited"}, X_RateLimit_Limit="3000",
              X_RateLimit_Remaining="0", X_RateLimit_Reset=reset),
        OK, clock=clock)
    result = d.send(make_request())
    assert (result.outcome.kind, result.attempts) == ("ok", 2)
    assert sum(clock.slept) >= 7.0
    assert script.seen[1][0] >= 7.0  # the second attempt left at or after the reset


def test_each_answer_is_timed_from_its_grant_for_the_budgets_count_margin() -> None:
    clock = FakeClock(start=0.0)
    budgets = RateBudgets(clock=clock.monotonic, wall=clock.time, sleep=clock.sleep)

    def answer(request: httpx.Request) -> httpx.Response:
        clock.advance(0.03)  # the request's time on the way and at the service
        return reply(201, {"message": "success"}, X_RateLimit_Reset=str(int(clock.time()) + 2))

    d = Deliverer(httpx.MockTransport(answer), KEY, budgets, base_url=BASE, sleep=clock.sleep,
                  clock=clock.monotonic, wall=clock.time)
    budget = budgets.budget(BASE, "users_track", requests=1, per_seconds=3)
    d.send(make_request())
    d.send(make_request())  # waits for a slot first: not part of the answer's time
    assert clock.slept
    assert budget.count_margin == pytest.approx(CLOCK_SKEW + 0.03)
    assert budget.service_edge is not None


def test_a_429_whose_reset_has_passed_ends_the_following_of_windows(deliverer: Factory) -> None:
    clock = FakeClock(start=0.0)
    budgets = RateBudgets(clock=clock.monotonic, wall=clock.time, sleep=clock.sleep)
    d, _, _ = deliverer(
        reply(201, {"message": "success"}, X_RateLimit_Reset=str(int(clock.time()) + 2)),
        reply(429, {"message": "rate limited"}, X_RateLimit_Reset=str(int(clock.time()) - 1)),
        OK, clock=clock, budgets=budgets)
    d.send(make_request())
    budget = budgets.budget(BASE, "users_track")
    assert budget.service_edge is not None
    assert d.send(make_request()).outcome.kind == "ok"
    assert budget.service_edge is None  # the sliding log alone from now on


@pytest.mark.parametrize("header", ["X_RateLimit_Reset", "Retry_After"])
def test_a_429_pauses_every_sender_of_the_group(deliverer: Factory, header: str) -> None:
    clock = FakeClock(start=0.0)
    budgets = RateBudgets(clock=clock.monotonic, wall=clock.time, sleep=clock.sleep)
    value = str(int(clock.time()) + 30) if header == "X_RateLimit_Reset" else "30"
    # The first integration gives up at once: waiting for the reset would pass its deadline.
    first, _, _ = deliverer(reply(429, **{header: value}), deadline=5.0, clock=clock,
                            budgets=budgets)
    second, script, _ = deliverer(OK, clock=clock, budgets=budgets)
    gave_up = first.send(make_request())
    assert (gave_up.outcome.kind, gave_up.attempts) == ("failed", 1)
    assert clock.monotonic() < 5.0
    assert second.send(make_request()).outcome.kind == "ok"
    assert script.seen[0][0] >= 30.0  # the other integration waited for the same reset


def test_retry_after_is_a_floor_for_the_backoff(deliverer: Factory) -> None:
    d, script, clock = deliverer(reply(503, UNAVAILABLE, Retry_After="12"), OK)
    result = d.send(make_request())
    assert result.outcome.kind == "ok"
    assert clock.slept[0] >= 12.0
    assert script.seen[1][0] >= 12.0


def test_500_without_resend_is_in_doubt_after_one_attempt(deliverer: Factory) -> None:
    d, script, _ = deliverer(reply(500, {"message": "oops"}), OK)
    result = d.send(make_request(resend_in_doubt=False, events=2))
    assert (result.outcome.kind, result.attempts, result.doubtful_attempts) == ("in_doubt", 1, 1)
    assert len(script.seen) == 1


def test_500_with_resend_is_sent_again(deliverer: Factory) -> None:
    d, script, _ = deliverer(reply(500), reply(504), OK)
    result = d.send(make_request(resend_in_doubt=True))
    assert (result.outcome.kind, result.attempts, result.doubtful_attempts) == ("ok", 3, 2)
    assert len(script.seen) == 3


def test_read_timeout_without_resend_is_in_doubt(deliverer: Factory) -> None:
    d, script, _ = deliverer(httpx.ReadTimeout("timed out"), OK)
    result = d.send(make_request(resend_in_doubt=False))
    assert result.outcome.kind == "in_doubt"
    assert len(script.seen) == 1


def test_connect_error_is_always_retried(deliverer: Factory) -> None:
    d, _, _ = deliverer(httpx.ConnectError("refused"), OK)
    result = d.send(make_request(resend_in_doubt=False))
    assert (result.outcome.kind, result.attempts) == ("ok", 2)


def test_401_is_fatal_and_stops_every_later_send(deliverer: Factory) -> None:
    d, script, _ = deliverer(reply(401, {"message": "Invalid API Key"}), OK)
    first = d.send(make_request())
    assert (first.outcome.kind, first.attempts) == ("fatal", 1)
    later = d.send(make_request())
    assert (later.outcome.kind, later.attempts) == ("fatal", 0)
    assert later.outcome.reason.startswith("not sent: an earlier request was refused (401")
    assert len(script.seen) == 1
    assert d.fatal == first.outcome


def test_400_fails_at_once(deliverer: Factory) -> None:
    d, script, _ = deliverer(reply(400, {"message": "Max Input Length Exceeded"}))
    result = d.send(make_request())
    assert (result.outcome.kind, result.attempts) == ("failed", 1)
    assert len(script.seen) == 1
    assert "Max Input Length Exceeded" in result.outcome.reason


def test_item_errors_map_to_the_right_items_across_arrays(deliverer: Factory) -> None:
    body = {"message": "success", "errors": [
        {"type": "'quantity' is not valid", "input_array": "purchases", "index": 1},
        {"type": "provided external_id is blacklisted and disallowed",
         "input_array": "events", "index": 0},
    ]}
    d, _, _ = deliverer(reply(201, body))
    request = make_request(attributes=3, events=2, purchases=2)
    result = d.send(request)
    assert result.outcome.kind == "ok"
    errors = {request.items[k].key: reason for k, reason in result.outcome.item_errors.items()}
    assert errors == {
        "row6": "'quantity' is not valid",
        "row3": "provided external_id is blacklisted and disallowed",
    }


def test_deadline_turns_retry_into_failed(deliverer: Factory) -> None:
    d, script, clock = deliverer(reply(503, UNAVAILABLE), deadline=10.0)
    result = d.send(make_request())
    assert result.outcome.kind == "failed"
    assert result.outcome.reason.startswith(f"gave up after {result.attempts} attempts")
    assert "503" in result.outcome.reason
    assert result.attempts == len(script.seen) > 1
    assert clock.monotonic() <= 10.0  # never slept past the deadline


def test_deadline_keeps_an_in_doubt_request_in_doubt(deliverer: Factory) -> None:
    d, _, _ = deliverer(reply(500), reply(503, UNAVAILABLE), deadline=10.0)
    result = d.send(make_request(resend_in_doubt=True))
    assert result.outcome.kind == "in_doubt"  # the first attempt may have been processed
    assert result.outcome.status == 503
    assert "may have been processed" in result.outcome.reason


def test_an_answer_never_given_is_retried_until_the_deadline_then_stays_in_doubt(
    deliverer: Factory,
) -> None:
    d, script, _ = deliverer(reply(500), deadline=20.0)
    result = d.send(make_request(resend_in_doubt=True))
    assert result.outcome.kind == "in_doubt"
    assert result.attempts == result.doubtful_attempts == len(script.seen) > 1
    assert result.outcome.reason.startswith(f"gave up after {result.attempts} attempts")


def test_backoff_grows(deliverer: Factory) -> None:
    d, _, clock = deliverer(reply(502), reply(502), reply(502), OK)
    assert d.send(make_request()).outcome.kind == "ok"
    assert len(clock.slept) == 3
    assert clock.slept[0] < clock.slept[2]


def test_one_debug_line_per_attempt_and_a_warning_per_retry(
    deliverer: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="engage_sync.deliver.deliverer")
    d, _, _ = deliverer(reply(503, UNAVAILABLE), OK)
    d.send(make_request(events=2))
    mine = [r for r in caplog.records if r.name == "engage_sync.deliver.deliverer"]
    debug = [r.getMessage() for r in mine if r.levelno == logging.DEBUG]
    warnings = [r.getMessage() for r in mine if r.levelno == logging.WARNING]
    assert debug == [
        "[demo_users] POST /users/track -> 503 retry (attempt 1, 2 items)",
        "[demo_users] POST /users/track -> 201 ok (attempt 2, 2 items)",
    ]
    assert len(warnings) == 1
    assert "503 service unavailable" in warnings[0]


def test_the_key_and_payload_never_reach_logs_errors_or_reprs(
    deliverer: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers: list[Answer] = [
        reply(429, X_RateLimit_Reset=str(int(EPOCH) + 2)),
        httpx.LocalProtocolError(f"Illegal header value b'Bearer {KEY}'"),
        reply(500, {"message": f"echo {KEY}"}),
        httpx.ReadError(f"connection reset while sending Bearer {KEY}"),
        reply(401, {"message": "Invalid API Key"}),
    ]
    d, _, _ = deliverer(*answers)
    results = [d.send(make_request(resend_in_doubt=True)) for _ in range(4)]
    texts = [repr(d), *(repr(r) for r in results), *(r.outcome.reason for r in results)]
    for record in caplog.records:
        texts.append(record.getMessage())
        texts.append(str(record.exc_text or ""))
    assert any("fatal" in t for t in texts)  # the scenario did reach the 401
    for text in texts:
        assert KEY not in text
        assert "PAYLOAD-VALUE" not in text


def test_a_bad_key_is_refused_without_being_repeated() -> None:
    transport = httpx.MockTransport(lambda r: OK)
    for bad in ("", " sk-padded ", "sk-with\nnewline"):
        with pytest.raises(ValueError) as info:
            Deliverer(transport, bad, RateBudgets(), base_url=BASE)
        assert "sk-" not in str(info.value)


def test_many_threads_share_one_deliverer(deliverer: Factory) -> None:
    d, script, _ = deliverer(OK)
    requests = [make_request(events=3) for _ in range(200)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(d.send, requests))
    assert all(r.outcome.kind == "ok" and r.attempts == 1 for r in results)
    assert len(script.seen) == 200


class _BreaksMidBody(httpx.SyncByteStream):
    """An answer whose body breaks off after its first bytes, as a dropped connection's does."""

    def __init__(self) -> None:
        self.closed = False

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield b'{"message":'
        raise httpx.ReadError("connection reset by peer")

    def close(self) -> None:
        self.closed = True


def test_an_answer_cut_off_mid_body_is_in_doubt_and_its_connection_released() -> None:
    streams: list[_BreaksMidBody] = []

    def answer(request: httpx.Request) -> httpx.Response:
        streams.append(_BreaksMidBody())
        return httpx.Response(201, stream=streams[-1])

    clock = FakeClock(start=0.0)
    d = Deliverer(httpx.MockTransport(answer), KEY, RateBudgets(), base_url=BASE,
                  sleep=clock.sleep, clock=clock.monotonic, wall=clock.time)
    result = d.send(make_request(resend_in_doubt=False))
    assert result.outcome.kind == "in_doubt" and "ReadError" in result.outcome.reason
    assert (result.attempts, result.doubtful_attempts) == (1, 1)
    assert [s.closed for s in streams] == [True]  # the connection went back to the pool


def test_budget_holds_while_a_send_waits_for_its_rate_budget() -> None:
    """What the send loop asks before it packs ahead (`ExactSendLoop._packs_ahead`)."""
    clock = FakeClock(start=0.0)
    seen: list[bool] = []
    budgets = RateBudgets(clock=clock.monotonic, wall=clock.time,
                          sleep=lambda s: (seen.append(d.budget_holds()), clock.sleep(s)))
    d = Deliverer(httpx.MockTransport(lambda r: reply(201, {"message": "success"})), KEY,
                  budgets, base_url=BASE, sleep=clock.sleep, clock=clock.monotonic,
                  wall=clock.time)
    budgets.budget(BASE, "users_track", requests=1, per_seconds=3)
    assert not d.budget_holds()
    d.send(make_request())
    assert seen == [] and not d.budget_holds()
    d.send(make_request())  # waits 3 s for a slot
    assert seen == [True] and not d.budget_holds()
