"""Progress lines: rows read of the counted total, share, time left; the last line from the
record."""

from __future__ import annotations

from engage_sync.status.progress_report import ProgressReporter, final_line, progress_line
from engage_sync.status.record import record

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
        "in doubt 0, unchanged 0; 4 s elapsed")


def test_unchanged_rows_are_read_rows() -> None:
    """A re-run whose 2,000 rows the field diff found unchanged read 2,000 rows: its record
    and its last line say so (not `read 0 of 2,000`)."""
    run = {"job_status": "success", "sync_start_time": None, "sync_finish_time": None,
           "last_timestamp_synced": None, "rows_synced": 0, "rows_failed_with_errors": 0,
           "rows_rejected": 0, "rows_in_doubt": 0, "rows_unchanged": 2000, "mode": "incremental",
           "run_id": "r", "integration": "users", "seq": 1}
    rec = record(run)
    assert (rec["rows_read"], rec["rows_unchanged"], rec["rows_synced"]) == (2000, 2000, 0)
    assert final_line(rec, 2000, 1.0).startswith(
        "success: read 2,000 of 2,000 rows (counted, 100%), synced 0, failed 0, rejected 0, "
        "in doubt 0, unchanged 2,000;")


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
        "rejected 0, in doubt 0, unchanged 0; 3 s elapsed",
    ]
