"""The window of a run, computed without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engage_sync.cursor.window import align, backfill_window, incremental_window, shift

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("sample", "expected"), [
    (datetime(2026, 1, 1), datetime(2026, 3, 1, 12, 0)),  # naive column: naive UTC
    (datetime(2026, 1, 1, tzinfo=UTC), NOW),  # aware column: aware
    ("2026-01-01 00:00:00", "2026-03-01 12:00:00"),  # SQLite text, space separator
    ("2026-01-01T00:00:00", "2026-03-01T12:00:00"),
    (None, NOW),  # empty source: aware
])
def test_align_takes_the_form_of_the_source(sample: object, expected: object) -> None:
    assert align(NOW, sample) == expected


def test_align_reads_a_naive_value_as_utc_and_converts_other_zones() -> None:
    paris = datetime(2026, 3, 1, 13, 0, tzinfo=UTC).astimezone()
    assert align(paris, datetime(2026, 1, 1)) == datetime(2026, 3, 1, 13, 0)
    assert align(datetime(2026, 3, 1, 12, 0), datetime(2026, 1, 1)) == datetime(2026, 3, 1, 12)


def test_an_incremental_window_starts_after_the_cursor_and_stops_at_the_signpost() -> None:
    stored = (datetime(2026, 2, 1), "u1")
    w = incremental_window(stored, NOW, timedelta(minutes=5), None, datetime(2026, 1, 1))
    assert (w.start, w.signpost, w.floor, w.before) == (
        stored, datetime(2026, 3, 1, 11, 55), None, None)
    first = incremental_window(None, NOW, timedelta(0), None, datetime(2026, 1, 1))
    assert first.start is None


def test_lookback_rereads_from_cursor_minus_lookback() -> None:
    stored = ("2026-02-01 10:00:00", "u1")
    w = incremental_window(stored, NOW, timedelta(0), timedelta(hours=2), "2026-01-01 00:00:00")
    assert (w.start, w.floor) == (None, "2026-02-01 08:00:00")
    assert shift(datetime(2026, 2, 1, 10), timedelta(hours=2)) == datetime(2026, 2, 1, 8)
    with pytest.raises(ValueError, match="timestamp cursor"):
        shift(12, timedelta(hours=1))


def test_a_backfill_window_is_half_open_and_under_the_signpost() -> None:
    w = backfill_window(datetime(2026, 1, 1), datetime(2026, 1, 2), NOW, timedelta(minutes=1),
                        datetime(2026, 1, 1))
    assert (w.start, w.floor, w.before, w.signpost) == (
        None, datetime(2026, 1, 1), datetime(2026, 1, 2), datetime(2026, 3, 1, 11, 59))
