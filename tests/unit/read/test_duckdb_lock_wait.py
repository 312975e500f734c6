"""A DuckDB connect that meets another process's lock on the file tries again until its wait is
over (pure: the connect, the clock and the sleep are passed in)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from engage_sync.read.duckdb_turns import locked_elsewhere, waiting_for_lock

LOCKED = ('IO Error: Could not set lock on file "/data/w.duckdb": Conflicting lock is held in '
          "/usr/bin/python3.11 (PID 4242).")


class LockError(Exception):
    """Stands for duckdb.IOException: one message argument."""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def held_for(tries: int) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def connect() -> str:
        calls.append(1)
        if len(calls) <= tries:
            raise LockError(LOCKED)
        return "connection"

    return calls, connect


def test_a_lock_released_within_the_wait_is_waited_for() -> None:
    clock = Clock()
    calls, connect = held_for(6)
    assert waiting_for_lock(connect, 30, clock=clock, sleep=clock.sleep) == "connection"
    assert len(calls) == 7
    assert clock.slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]  # doubling, at most 1 s


def test_a_lock_held_past_the_wait_raises_the_drivers_error_with_the_wait() -> None:
    clock = Clock()
    calls, connect = held_for(10**6)
    with pytest.raises(LockError) as raised:
        waiting_for_lock(connect, 5, clock=clock, sleep=clock.sleep)
    assert str(raised.value).startswith("after waiting 5 s: IO Error: Could not set lock")
    assert clock.now == pytest.approx(105.0)  # the last pause ends at the deadline
    assert sum(clock.slept) == pytest.approx(5.0)
    assert len(calls) == len(clock.slept) + 1  # one last try at the deadline


def test_no_wait_fails_at_once_with_the_drivers_own_error() -> None:
    clock = Clock()
    calls, connect = held_for(1)
    with pytest.raises(LockError) as raised:
        waiting_for_lock(connect, 0, clock=clock, sleep=clock.sleep)
    assert str(raised.value) == LOCKED and calls == [1] and clock.slept == []


def test_other_errors_are_not_waited_on() -> None:
    clock = Clock()

    def connect() -> str:
        raise LockError("IO Error: Cannot open file: Permission denied")

    with pytest.raises(LockError, match="Permission denied"):
        waiting_for_lock(connect, 30, clock=clock, sleep=clock.sleep)
    assert clock.slept == []


def test_the_lock_is_told_by_the_drivers_words() -> None:
    assert locked_elsewhere(LockError(LOCKED))
    assert not locked_elsewhere(LockError("Unique file handle conflict"))


def test_a_wait_is_expected_so_it_is_said_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """Runs of one DuckDB file take turns (a schedule's ticks start them together): a wait
    is no warning, and it is said once however many tries it takes."""
    caplog.set_level(logging.DEBUG, logger="engage_sync.read")
    clock = Clock()
    _, connect = held_for(6)
    waiting_for_lock(connect, 30, clock=clock, sleep=clock.sleep)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "engage_sync.read"]
    assert said == [(logging.INFO, "the DuckDB file is held by another process; waiting up to "
                                   "30 s for it (warehouse.lock_wait_seconds)")]
