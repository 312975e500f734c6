"""Progress lines of a run: rows read of the window's total, share done, time left.

The window's total is counted with one COUNT query when the run opens (`window_rows` in the
counts the pipeline reports), so a line says `counted`; a resumed run's total includes rows a
previous attempt already sent, so its share and time left are upper bounds. The last line of a
run is made from its status record, so it always agrees with the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

EVERY_SECONDS = 2.0


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def progress_line(counts: Mapping[str, int], total: int | None, elapsed: float) -> str:
    """One line: `read R of T rows (counted, P%)`, the other counts, elapsed and time left.
    Without a total (not counted yet) there is no share or time left. Time left assumes the
    rows still to read go at the rate of those read so far."""
    read = counts.get("read", 0)
    head = f"read {read:,} rows"
    tail = f"{_duration(elapsed)} elapsed"
    if total is not None:
        share = read / total if total else 1.0
        head = f"read {read:,} of {total:,} rows (counted, {share:.0%})"
        if read and total > read:
            tail += f", about {_duration(elapsed * (total - read) / read)} left"
    parts = [head] + [f"{k.replace('_', ' ')} {v:,}" for k, v in counts.items()
                      if k not in ("read", "window_rows")]
    return f"{', '.join(parts)}; {tail}"


def final_line(record: Mapping[str, Any], total: int | None, elapsed: float) -> str:
    """The run's last progress line, from its status record (the counts the record holds)."""
    counts = {"read": int(record.get("rows_read") or 0),
              "synced": int(record.get("rows_synced") or 0),
              "failed": int(record.get("rows_failed_with_errors") or 0),
              "rejected": int(record.get("rows_rejected") or 0),
              "in_doubt": int(record.get("rows_in_doubt") or 0),
              "unchanged": int(record.get("rows_unchanged") or 0)}
    return f"{record.get('job_status')}: {progress_line(counts, total, elapsed)}"


class ProgressReporter:
    """A pipeline `on_progress` callback: a progress line at most every EVERY_SECONDS (the
    first as soon as the window is counted), then `finish(record)` logs the last one."""

    def __init__(self, emit: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.emit, self.clock = emit, clock
        self.started = clock()
        self.last = float("-inf")
        self.total: int | None = None

    def __call__(self, counts: Mapping[str, int]) -> None:
        now = self.clock()
        first_total = self.total is None and "window_rows" in counts
        self.total = counts.get("window_rows", self.total)
        if first_total or now - self.last >= EVERY_SECONDS:
            self.last = now
            self.emit(f"progress: {progress_line(counts, self.total, now - self.started)}")

    def finish(self, record: Mapping[str, Any]) -> None:
        self.emit(f"progress: {final_line(record, self.total, self.clock() - self.started)}")
