"""Progress lines: rows read of the counted total, share, time left; the last line from the
record."""

from __future__ import annotations

from engage_sync.status.progress_report import ProgressReporter, final_line, progress_line

COUNTS = {"read": 30_000, "requests": 400, "synced": 29_990, "failed": 0, "rejected": 10,
          "in_doubt": 0, "window_rows": 300_000}


def test_a_line_shows_read_of_the_counted_total_share_and_time_left() -> None:
    line = progress_line(COUNTS, 300_000, elapsed=10.0)
    assert line == ("read 30,000 of 300,000 rows (counted, 10%), requests 400, synced 29,990, "
                    "failed 0, rejected 10, in doubt 0; 10 s elapsed, about 2 min left")


def test_without_a_total_there_is_no_share_nor_time_left() -> None:
    line = progress_line({"read": 5, "synced": 5}, None, elapsed=3.0)
    assert line == "read 5 rows, synced 5; 3 s elapsed"


def test_long_times_read_in_minutes_and_hours_and_an_empty_window_is_done() -> None:
    assert progress_line({"read": 1}, 4, elapsed=600).endswith("10 min elapsed, about 30 min left")
    assert progress_line({"read": 1}, 100, elapsed=600).endswith("about 16.5 h left")
    assert progress_line({"read": 0}, 0, elapsed=1).startswith("read 0 of 0 rows (counted, 100%)")


def test_the_last_line_is_made_from_the_record() -> None:
    record = {"job_status": "partial", "rows_read": 500, "rows_synced": 499,
              "rows_failed_with_errors": 1, "rows_rejected": 1, "rows_in_doubt": 0}
    assert final_line(record, 500, 4.0) == (
        "partial: read 500 of 500 rows (counted, 100%), synced 499, failed 1, rejected 1, "
        "in doubt 0; 4 s elapsed")


def test_the_reporter_throttles_but_shows_the_total_at_once_and_finishes_from_the_record(
) -> None:
    now = [0.0]
    lines: list[str] = []
    reporter = ProgressReporter(lines.append, clock=lambda: now[0])
    reporter({"read": 0})  # first call: a line
    now[0] = 0.5
    reporter({"read": 0, "window_rows": 10})  # the total arrives: a line at once
    now[0] = 1.0
    reporter({"read": 3, "window_rows": 10})  # within 2 s: none
    now[0] = 2.6
    reporter({"read": 6, "window_rows": 10})
    reporter.finish({"job_status": "success", "rows_read": 10, "rows_synced": 10})
    assert lines == [
        "progress: read 0 rows; 0 s elapsed",
        "progress: read 0 of 10 rows (counted, 0%); 0 s elapsed",
        "progress: read 6 of 10 rows (counted, 60%); 3 s elapsed, about 2 s left",
        "progress: success: read 10 of 10 rows (counted, 100%), synced 10, failed 0, "
        "rejected 0, in doubt 0; 3 s elapsed",
    ]
