"""The message of a run that synced nothing, and keys shown for people."""

from __future__ import annotations

import pytest

from engage_sync.status.record import job_message, shown_key


@pytest.mark.parametrize(("counts", "start"), [
    ((0, 0, 4, 0), "all 4 rows read were rejected before sending; `engage-sync errors users`"),
    ((0, 0, 0, 4), "all 4 rows read are in doubt: the service never confirmed"),
    ((0, 4, 0, 0), "the service refused all 4 rows read; `engage-sync errors users`"),
    ((0, 1, 2, 3), "none of the 6 rows read was synced: 2 rejected, 1 refused by the service, "
                   "3 in doubt; `engage-sync errors users`"),
])
def test_a_run_that_synced_nothing_says_why_and_what_to_do(
        counts: tuple[int, int, int, int], start: str) -> None:
    message = job_message("users", *counts)
    assert message is not None and message.startswith(start)


@pytest.mark.parametrize("counts", [(1, 0, 5, 5), (3, 0, 0, 0), (0, 0, 0, 0)])
def test_other_runs_need_no_message(counts: tuple[int, int, int, int]) -> None:
    assert job_message("users", *counts) is None


@pytest.mark.parametrize(("stored", "shown"), [
    ("", "(no value)"), ("u1", "u1"),
    ("|sha1:0123456789abcdef", "(no value)|sha1:0123456789abcdef"),
    ("a||b", "a|(no value)|b"),
])
def test_empty_key_parts_are_shown_plainly(stored: str, shown: str) -> None:
    assert shown_key(stored) == shown


def test_rows_found_unchanged_count_as_in_step_not_as_an_error() -> None:
    """A diffed backfill of synced rows with two bad rows: nothing sent, yet the service holds
    the other rows already, so the run is partial, not an error with an alert."""
    from engage_sync.status.record import job_status

    assert job_status(0, 0, 2, 0, unchanged=200) == "partial"
    assert job_status(0, 0, 0, 0, unchanged=200) == "success"
    assert job_message("users", 0, 0, 2, 0, 200) is None
    assert job_status(0, 0, 2, 0) == "error"
