"""Which rows a run reads (pure): from the stored cursor to the signpost `now − settle_lag`.

Invariants:
- the signpost and every bound are expressed in the type of the source's cursor values
  (aware datetime, naive datetime taken as UTC, or text as SQLite keeps it), so the warehouse
  compares like with like;
- an incremental window starts strictly after the stored cursor; with `lookback` it re-reads
  from `cursor − lookback` instead (rows acknowledged before are filtered by the caller);
- a backfill window is `start <= cursor < end`, at or before the signpost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from engage_sync.cursor.progress import Cursor


@dataclass(frozen=True, slots=True)
class Window:
    """Rows with start < (cursor, key) and cursor <= signpost; start None = from the beginning.

    `floor` (backfills, lookback) additionally requires cursor >= floor, and `before`
    (backfills) cursor < before, so adjacent backfill chunks never share a row.
    `partition` (index, count) keeps only the rows of users whose key hashes to `index`
    (`key_digest.key_bucket`): the partitions of a window are disjoint and cover it.
    `until` (a retry of one request's rows) additionally requires (cursor, key) <= until.
    """

    start: Cursor | None
    signpost: Any
    floor: Any = None
    before: Any = None
    partition: tuple[int, int] | None = None
    until: Cursor | None = None


def align(value: datetime, sample: Any) -> Any:
    """A UTC datetime (naive = UTC) in the form of the source's cursor values (aware, naive
    UTC or text)."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(sample, datetime):
        return value if sample.tzinfo is not None else value.replace(tzinfo=None)
    if isinstance(sample, str):
        sep = " " if len(sample) > 10 and sample[10] == " " else "T"
        return value.replace(tzinfo=None).isoformat(sep=sep)
    return value


def shift(value: Any, delta: timedelta) -> Any:
    """A cursor value moved back by `delta`, in the value's own type."""
    if isinstance(value, datetime):
        return value - delta
    if isinstance(value, str):
        sep = " " if len(value) > 10 and value[10] == " " else "T"
        return (datetime.fromisoformat(value) - delta).isoformat(sep=sep)
    raise ValueError(f"lookback needs a timestamp cursor, not {type(value).__name__}")


def incremental_window(stored: Cursor | None, now: datetime, settle_lag: timedelta,
                       lookback: timedelta | None, sample: Any) -> Window:
    """After the stored cursor (None: from the beginning), up to the signpost."""
    signpost = align(now - settle_lag, sample)
    if lookback and stored is not None:
        return Window(start=None, signpost=signpost, floor=shift(stored[0], lookback))
    return Window(start=stored, signpost=signpost)


def backfill_window(start: datetime | None, end: datetime | None, now: datetime,
                    settle_lag: timedelta, sample: Any) -> Window:
    """start <= cursor < end, and never past the signpost."""
    return Window(
        start=None,
        signpost=align(now - settle_lag, sample),
        floor=align(start, sample) if start else None,
        before=align(end, sample) if end else None,
    )
