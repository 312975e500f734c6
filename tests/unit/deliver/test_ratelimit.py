"""RateBudget and RateBudgets on a fake clock: nothing here really sleeps."""

from __future__ import annotations

import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engage_sync.deliver.rate_headers import parse_reset, parse_retry_after
from engage_sync.deliver.ratelimit import RateBudget, RateBudgets
from engage_sync.deliver.service_windows import CLOCK_SKEW, EDGE_MARGIN
from tests.fakes import EPOCH, FakeClock


def budget(clock: FakeClock, requests: int = 5, per_seconds: float = 1.0) -> RateBudget:
    return RateBudget(requests, per_seconds, clock=clock.monotonic, wall=clock.time,
                      sleep=clock.sleep)


def grants(b: RateBudget, clock: FakeClock, n: int) -> list[float]:
    out = []
    for _ in range(n):
        b.acquire()
        out.append(clock.monotonic())  # single thread: the grant happened at this reading
    return out


def max_in_window(times: list[float], window: float) -> int:
    """The most grants in any half-open span [t, t + window)."""
    best = 0
    for i, start in enumerate(times):
        best = max(best, sum(1 for t in times[i:] if t < start + window))
    return best


def test_a_burst_up_to_the_limit_goes_at_once_then_waits_a_window() -> None:
    clock = FakeClock()
    b = budget(clock, 5, 1.0)
    times = grants(b, clock, 5)
    assert times == [100.0] * 5
    assert clock.slept == []
    b.acquire()
    assert clock.monotonic() == pytest.approx(101.0)


def test_never_more_than_the_limit_in_any_window() -> None:
    clock = FakeClock()
    b = budget(clock, 7, 3.0)
    times = grants(b, clock, 100)
    assert max_in_window(times, 3.0) == 7
    # and the budget is used fully: 15 bursts of 7, one per window, the last 14 windows on
    assert times[-1] - times[0] == pytest.approx(14 * 3.0, abs=1e-3)


def test_try_acquire_never_blocks_and_says_how_long_to_wait() -> None:
    clock = FakeClock()
    b = budget(clock, 1, 2.0)
    assert b.try_acquire() == 0.0
    clock.advance(0.5)
    assert b.try_acquire() == pytest.approx(1.5)


def test_pause_after_429_holds_everyone_until_the_reset() -> None:
    clock = FakeClock()
    b = budget(clock, 100, 1.0)
    b.pause_until(clock.time() + 7.0)
    assert b.acquire() == pytest.approx(7.0)
    assert clock.monotonic() == pytest.approx(107.0)
    b.pause_until(clock.time() - 5.0)  # a reset already past changes nothing
    assert b.acquire() == 0.0


def test_pause_is_capped_so_a_wild_header_cannot_freeze_a_run() -> None:
    clock = FakeClock()
    b = RateBudget(10, 1.0, clock=clock.monotonic, wall=clock.time, sleep=clock.sleep,
                   max_pause=60.0)
    b.pause_until(clock.time() + 10**9)
    assert b.acquire() == pytest.approx(60.0)


def test_a_lower_limit_header_is_adopted_a_higher_one_ignored() -> None:
    clock = FakeClock()
    b = budget(clock, 3000, 3.0)
    b.observe({"X-RateLimit-Limit": "50000"})
    assert b.limit == 3000
    b.observe({"x-ratelimit-limit": "4"})  # HTTP/2 sends lower-case names
    assert b.limit == 4
    times = grants(b, clock, 9)
    assert max_in_window(times, 3.0) == 4


def test_remaining_caps_grants_until_the_service_window_resets() -> None:
    clock = FakeClock()
    b = budget(clock, 100, 1.0)
    reset = clock.time() + 2.0
    b.observe({"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "2",
               "X-RateLimit-Reset": str(reset)})
    assert grants(b, clock, 2) == [100.0, 100.0]
    b.acquire()
    assert clock.monotonic() == pytest.approx(102.0)  # waited for the service's reset


def test_a_stale_larger_remaining_does_not_loosen_the_window() -> None:
    clock = FakeClock()
    b = budget(clock, 100, 10.0)
    reset = str(clock.time() + 5.0)
    b.observe({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": reset})
    b.observe({"X-RateLimit-Remaining": "50", "X-RateLimit-Reset": reset})
    b.acquire()
    assert b.try_acquire() == pytest.approx(5.0)


def test_malformed_or_missing_headers_are_ignored() -> None:
    clock = FakeClock()
    b = budget(clock, 5, 1.0)
    b.observe({"X-RateLimit-Limit": "lots", "X-RateLimit-Remaining": "-3",
               "X-RateLimit-Reset": "soon"})
    b.observe({})
    assert b.limit == 5
    assert len(grants(b, clock, 5)) == 5
    assert clock.slept == []


def test_header_parsers() -> None:
    now = EPOCH
    assert parse_reset({"X-RateLimit-Reset": str(int(now) + 3)}, now) == now + 3
    assert parse_reset({"x-ratelimit-reset": "3"}, now) == now + 3  # a delay, not an epoch
    assert parse_reset({}, now) is None
    assert parse_retry_after({"Retry-After": "12"}, now) == 12.0
    assert parse_retry_after({"Retry-After": "Tue, 14 Nov 2023 22:13:40 GMT"}, now) == 20.0
    assert parse_retry_after({"Retry-After": "whenever"}, now) is None


def test_threads_sharing_a_budget_never_beat_its_rate() -> None:
    clock = FakeClock()
    b = budget(clock, 10, 1.0)
    per_thread, threads = 50, 8

    def work() -> None:
        for _ in range(per_thread):
            b.acquire()

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    # 400 grants at 10 per second: the first 10 are free, the other 390 need 39 windows.
    assert clock.monotonic() - 100.0 >= 39.0 - 1e-6


def test_registry_shares_one_budget_per_service_and_group() -> None:
    clock = FakeClock()
    reg = RateBudgets(clock=clock.monotonic, wall=clock.time, sleep=clock.sleep)
    track = reg.budget("https://rest.example.com/", "users_track")
    assert reg.budget("https://REST.example.com", "users_track") is track
    assert (track.limit, track.per_seconds) == (3000, 3.0)
    sub = reg.budget("https://rest.example.com", "subscription")
    assert (sub.limit, sub.per_seconds) == (5000, 60.0)
    ident = reg.budget("https://rest.example.com", "identity")
    assert (ident.limit, ident.per_seconds) == (20000, 60.0)
    assert reg.budget("https://other.example.com", "users_track") is not track
    with pytest.raises(KeyError):
        reg.budget("https://rest.example.com", "nonsense")


def test_registry_explicit_rate_sets_then_only_tightens() -> None:
    clock = FakeClock()
    reg = RateBudgets(clock=clock.monotonic, wall=clock.time, sleep=clock.sleep)
    b = reg.budget("http://x", "users_track", requests=50_000, per_seconds=60)
    assert (b.limit, b.per_seconds) == (50_000, 60.0)
    reg.budget("http://x", "users_track", requests=3000, per_seconds=3)  # faster: ignored
    assert (b.limit, b.per_seconds) == (50_000, 60.0)
    reg.budget("http://x", "users_track", requests=100, per_seconds=60)  # slower: adopted
    assert (b.limit, b.per_seconds) == (100, 60.0)


STEP = st.one_of(
    st.tuples(st.just("acquire"), st.integers(1, 25)),
    st.tuples(st.just("advance"), st.floats(0, 5, allow_nan=False)),
    st.tuples(st.just("pause"), st.floats(0, 3, allow_nan=False)),
    st.tuples(st.just("remaining"), st.integers(0, 10)),
)


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 10),
    window=st.sampled_from([0.25, 1.0, 3.0]),
    transit=st.one_of(st.none(), st.floats(0, 0.6, allow_nan=False)),
    steps=st.lists(STEP, max_size=30),
)
def test_property_no_window_ever_holds_more_than_the_limit(
    limit: int, window: float, transit: float | None, steps: list[tuple[str, float]]
) -> None:
    """Grants made while the budget keeps to its sliding log (before any reset was seen, after
    a pause, after an answer too slow) leave no span of `window` with more than `limit`. Of
    the service's windows whose last grant was made while it followed them, none holds more
    than `limit`, wherever the service's edges are (up to the clock skew after ours, or up to
    the count margin before) and however long each request takes to be counted (from nothing
    to the count margin less the service's lead)."""
    clock = FakeClock(start=12345.678)
    b = budget(clock, limit, window)
    widest = min(EDGE_MARGIN, window / 4)
    counts = widest if transit is None else CLOCK_SKEW + transit
    times: list[float] = []
    following: list[bool] = []
    follows, ended = False, counts > widest
    for op, arg in steps:
        if op == "acquire":
            times += grants(b, clock, int(arg))
            following += [follows] * int(arg)
        elif op == "advance":
            clock.advance(arg)
        elif op == "pause":
            b.pause_until(clock.time() + arg)
            follows, ended = False, True
        else:
            b.observe({"X-RateLimit-Remaining": str(int(arg)),
                       "X-RateLimit-Reset": str(clock.window_end(window))}, transit)
            follows = not ended
    assert times == sorted(times)
    for j in range(limit, len(times)):
        if not following[j]:
            assert times[j] - times[j - limit] >= window - 1e-9
    eps = 1e-6  # the fake clock's epoch readings round in the last digits
    for off in (-0.99 * counts, -0.5 * counts, 0.0, 0.5 * CLOCK_SKEW, 0.99 * CLOCK_SKEW):
        slowest = 0.99 * (counts - max(0.0, -off))
        counted = [t + slowest * ((i * 7) % 5) / 4 for i, t in enumerate(times)]  # 0 to slowest
        windows: dict[int, list[int]] = {}
        for i, c in enumerate(counted):
            windows.setdefault(math.floor((EPOCH + c - off + eps) / window), []).append(i)
        for k, held in windows.items():
            if following[max(held)]:
                assert len(held) <= limit, (off, k, held)


def test_after_a_reset_is_seen_a_full_budget_waits_for_the_services_edge_not_a_window() -> None:
    clock = FakeClock()
    b = budget(clock, 5, 3.0)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)})  # the service's window ends at 101
    assert grants(b, clock, 5) == [100.0] * 5
    # a sliding log would wait to 103; the next window is used once the clocks' skew is past
    assert grants(b, clock, 5) == [pytest.approx(101.0 + CLOCK_SKEW)] * 5
    assert grants(b, clock, 1) == [pytest.approx(104.0 + CLOCK_SKEW)]


def test_a_grant_within_the_margin_of_an_edge_counts_in_both_windows() -> None:
    clock = FakeClock()
    b = budget(clock, 5, 3.0)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)})  # edges at 101, 104, ...
    clock.advance(0.8)  # 100.8: within the margin before the edge at 101
    assert grants(b, clock, 5) == [pytest.approx(100.8)] * 5
    # the window from 101 holds them too (no answer was timed: the margin is the widest): it
    # is full until the next opens at 104.05 (the log, over the window and the margin: 104.3)
    assert grants(b, clock, 1) == [pytest.approx(104.0 + CLOCK_SKEW)]


@pytest.mark.parametrize(("answers", "before", "next_grant"), [
    ([0.01], 0.2, 101.0 + CLOCK_SKEW),  # quick answers: counted in the window before only
    ([0.2], 0.2, 104.0 + CLOCK_SKEW),  # slower ones: in both
    ([0.01, 0.2], 0.2, 104.0 + CLOCK_SKEW),  # the slowest answer seen, not the last
    ([None], 0.2, 104.0 + CLOCK_SKEW),  # no answer timed: the widest margin
    ([0.01, 2.0], 0.2, 103.8),  # slower than any margin: the sliding log alone from then on
    ([2.0], 0.6, 103.4),
])
def test_the_count_margin_is_the_skew_plus_the_slowest_answer_timed(
        answers: list[float | None], before: float, next_grant: float) -> None:
    clock = FakeClock()
    b = budget(clock, 5, 3.0)
    for elapsed in answers:  # edges at 101, 104, ...
        b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)}, elapsed)
    clock.advance(1.0 - before)
    grants(b, clock, 5)
    assert grants(b, clock, 1) == [pytest.approx(next_grant)]


def test_a_window_is_used_only_the_clock_skew_after_its_edge() -> None:
    clock = FakeClock()
    b = budget(clock, 5, 3.0)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)})  # edges at 101, 104, ...
    clock.advance(0.2)
    grants(b, clock, 5)  # at 100.2, a window's worth before the count margin of the edge
    clock.advance(0.82)  # 101.02: past the edge here, perhaps not yet at the service
    assert grants(b, clock, 1) == [pytest.approx(101.0 + CLOCK_SKEW)]


def test_windows_shorter_than_four_skews_are_never_followed() -> None:
    clock = FakeClock()
    b = budget(clock, 2, 4 * CLOCK_SKEW - 0.01)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 0.05)})  # no answer timed
    assert b.service_edge is None


def test_a_window_tightened_below_four_skews_ends_the_following() -> None:
    clock = FakeClock()
    b = budget(clock, 60, 3.0)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)}, elapsed=0.01)
    b.tighten(15, 1.0)  # a slower rate, a window still followed
    assert b.service_edge is not None and b.count_margin == pytest.approx(CLOCK_SKEW + 0.01)
    b.tighten(2, 4 * CLOCK_SKEW - 0.01)  # slower again, in windows too short to follow
    assert (b.limit, b.service_edge) == (2, None)


def test_the_edge_follows_the_last_reset_seen() -> None:
    clock = FakeClock()
    b = budget(clock, 5, 3.0)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)}, elapsed=0.01)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 2.0)}, elapsed=0.01)  # a grid moved
    grants(b, clock, 5)
    assert grants(b, clock, 1) == [pytest.approx(102.0 + CLOCK_SKEW)]


def test_a_429_turns_the_budget_back_to_its_sliding_log() -> None:
    clock = FakeClock()
    b = budget(clock, 5, 3.0)
    b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)})
    grants(b, clock, 5)
    b.pause_until(clock.time())  # a 429 whose reset is already here: no pause, no more edges
    b.observe({"X-RateLimit-Reset": str(clock.time() + 1.0)})  # not followed again
    assert grants(b, clock, 1) == [pytest.approx(103.0)]


def test_holding_is_said_while_a_request_sleeps_for_its_grant_and_only_then() -> None:
    clock = FakeClock()
    seen: list[bool] = []
    b = RateBudget(2, 1.0, clock=clock.monotonic, wall=clock.time,
                   sleep=lambda seconds: (seen.append(b.holding), clock.sleep(seconds)))
    grants(b, clock, 2)
    assert not b.holding and seen == []  # a grant at once is no hold
    b.acquire()
    assert seen == [True] and not b.holding
