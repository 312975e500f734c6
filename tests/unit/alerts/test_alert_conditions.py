"""The alert conditions and their transitions, pure: raised once when a condition starts to
hold, cleared once when it stops, nothing while it cannot tell."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engage_sync.alerts.conditions import (
    RunFigures,
    failed,
    freshness,
    transition,
    volume,
)

T = datetime(2026, 1, 1, tzinfo=UTC)


def run(rows: int, points: int | None = None, status: str = "success",
        mode: str = "incremental") -> RunFigures:
    return RunFigures("r", status, mode, rows, rows * 2 if points is None else points)


def changes(answers: list[bool | None]) -> list[str]:
    """The changes a sequence of answers makes, starting with the alert not raised."""
    raised, out = False, []
    for holds in answers:
        change = transition(raised, holds)
        if change is not None:
            out.append(change)
            raised = change == "raised"
    return out


def test_an_alert_is_raised_once_and_cleared_once_however_long_its_condition_lasts() -> None:
    assert changes([False, True, True, True, False, False, True, False]) == [
        "raised", "cleared", "raised", "cleared"]


def test_an_answer_that_cannot_tell_changes_nothing() -> None:
    assert changes([None, True, None, None, True, None, False, None]) == ["raised", "cleared"]
    assert transition(True, None) is None and transition(False, None) is None


HISTORY = [run(10_000) for _ in range(5)]


@pytest.mark.parametrize("rows, holds", [(100, True), (1_999, True), (2_000, False),
                                         (10_000, False), (50_000, False), (50_001, True)])
def test_volume_is_a_jump_or_drop_past_the_factor_from_the_median(rows: int,
                                                                  holds: bool) -> None:
    assert volume(run(rows, points=20_000), HISTORY, 5).holds is holds


def test_points_billed_alone_can_raise_volume() -> None:
    found = volume(run(10_000, points=100), HISTORY, 5)
    assert found.holds is True
    assert found.figures["points_billed_change"] == "drop"
    assert "rows_read_change" not in found.figures


def test_volume_needs_three_successful_incremental_runs_to_compare_with() -> None:
    few = [run(10_000), run(10_000), run(10_000, status="error"), run(10_000, mode="backfill")]
    assert volume(run(100), few, 5).holds is None
    assert volume(run(100), [*few, run(10_000)], 5).holds is True


def test_volume_is_not_told_of_a_failed_or_non_incremental_run() -> None:
    assert volume(run(100, status="error"), HISTORY, 5).holds is None
    assert volume(run(100, mode="full_resync"), HISTORY, 5).holds is None


def test_the_median_resists_one_odd_run_and_a_median_of_zero_is_not_compared() -> None:
    odd = [run(100), *HISTORY]  # the newest run was the odd one
    assert volume(run(10_000), odd, 5).holds is False
    zeros = [run(0, points=0) for _ in range(4)]
    assert volume(run(500, points=0), zeros, 5).holds is False


def test_freshness_from_the_last_success_else_the_first_run() -> None:
    within = timedelta(hours=2)
    assert freshness(T, T - timedelta(hours=1), T - timedelta(days=3), within).holds is False
    assert freshness(T, T - timedelta(hours=3), T - timedelta(days=3), within).holds is True
    assert freshness(T, None, T - timedelta(hours=1), within).holds is False
    assert freshness(T, None, T - timedelta(hours=3), within).holds is True
    assert freshness(T, None, None, within).holds is None


@pytest.mark.parametrize("status, holds", [("success", False), ("partial", True),
                                           ("error", True), ("config_error", True)])
def test_failed_is_a_run_that_did_not_end_in_success(status: str, holds: bool) -> None:
    assert failed(run(10, status=status)).holds is holds
