"""The throttle of a running run's counts (`CountsShown`), on a fake clock."""

from __future__ import annotations

import logging

import pytest

from engage_sync.run.running_counts import CountsShown


def test_the_first_tick_writes_then_one_write_every_few_seconds() -> None:
    now = [100.0]
    writes: list[float] = []
    shown = CountsShown(lambda: writes.append(now[0]), every=2.0, clock=lambda: now[0])
    for t in (100.0, 100.5, 101.9, 102.0, 102.1, 103.9, 104.0, 110.0):
        now[0] = t
        shown.tick()
    assert writes == [100.0, 102.0, 104.0, 110.0]


def test_a_failed_write_is_logged_and_does_not_stop_the_run(
    caplog: pytest.LogCaptureFixture
) -> None:
    def write() -> None:
        raise RuntimeError("database is locked")

    with caplog.at_level(logging.WARNING, logger="engage_sync.run.running_counts"):
        CountsShown(write).tick()
    assert "database is locked" in caplog.text
