"""The cursor rule (DESIGN rules 1 and 3), in one place. Pure.

- A row's position is its `Cursor`: (cursor value, *key values), totally ordered, so rows that
  share an `UPDATED_AT` are neither skipped nor read twice.
- A run's source order is cut into contiguous `Segment`s: one per request, or a stretch of rows
  that needs no request (rejected, or settled by an earlier attempt of the run). `Progress`
  moves only over the longest prefix of settled segments, so it never passes a row that is
  not synced, rejected, failed or in doubt.
- The integration's cursor follows the progress of incremental and full-resync runs and never
  moves backwards (`may_move_cursor`); a backfill never moves it.
- A partitioned run's partitions each keep their own progress and never move the cursor
  themselves; the cursor may move to `partitions_settled`: the least progress of the
  partitions still open (every row at or before it is settled in every partition), or, once
  all have read their whole window, the furthest (the window's last row, as one run would).
- Lookback remembers each row that ended as (row key, `stamp` of its cursor value, `digest` of
  what was sent, or `REJECTED`).
- `Ranges` answers "was this position already settled?" for resumes and backfills.
- Cursors are stored as JSON text (`encode_cursor`) that decodes to the same Python types.
- A NULL key value is never None in a cursor: it is `NULL_KEY`, which sorts before every
  value (as the read query orders it, NULLS FIRST), so cursors compare in Python without a
  TypeError and a stored cursor holding it still selects every later row (`null_keys.py`).
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from json.encoder import encode_basestring_ascii as _quoted  # json.dumps's own string quoting
from typing import Any, Literal

from engage_sync.cursor.null_keys import NULL_KEY

Cursor = tuple[Any, ...]
"""(cursor value, *key values): the position of a row in the total order of a source."""

Mode = Literal["incremental", "backfill", "full_resync"]
"""The modes a user asks for (CLI, flow parameters)."""
RunMode = Mode | Literal["retry"]
"""A run's mode: a user's, or `retry` (the rows of failed requests, sent again by a later run
before its own window: `run/retries.py`)."""

REJECTED = "rejected"
"""The lookback mark of a row that was rejected rather than sent."""


def stamp(value: Any) -> str:
    """A cursor value as text that sorts like the value (UTC, fixed width)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")
    return str(value)


def digest(blob: bytes) -> str:
    """A short digest of what was sent for a row: equal content, equal digest."""
    return hashlib.sha1(blob).hexdigest()[:16]


def may_move_cursor(mode: RunMode, stored: Cursor | None, position: Cursor,
                    partition: bool = False) -> bool:
    """Whether a run of `mode` may set the integration cursor to `position`: incremental and
    full-resync runs move it, never backwards (lookback re-reads rows below it); backfills and
    retries never move it, and neither does one partition of a partitioned run (its
    coordinator moves it to `partitions_settled`)."""
    if mode in ("backfill", "retry") or partition:
        return False
    return stored is None or tuple(position) > tuple(stored)


@dataclass(frozen=True)
class PartitionProgress:
    """One partition of a run: how far its settled prefix reaches (None: from the window's
    start, which may be the beginning), and whether it read and settled its whole window."""

    position: Cursor | None
    done: bool


def partitions_settled(parts: Sequence[PartitionProgress]) -> Cursor | None:
    """Where every partition has settled every row of its own at or before: the least position
    of the partitions not done (None while one has settled nothing, or there are none), else
    the furthest position of all. Pure; `may_move_cursor` still decides whether the cursor
    moves there."""
    open_ = [p.position for p in parts if not p.done]
    if open_:
        if any(p is None for p in open_):
            return None
        return min(tuple(p) for p in open_ if p is not None)
    reached = [tuple(p.position) for p in parts if p.position is not None]
    return max(reached) if reached else None


@dataclass
class Segment:
    """A contiguous range (start, end] of the source order: one request, or rows that need
    none. `settled` once its request ended (acknowledged, failed or in doubt)."""

    start: Cursor | None
    end: Cursor
    settled: bool = False


class Progress:
    """The longest prefix of settled segments; its end is where the cursor may move.

    Segments are added in source order; `advance` pops the settled head."""

    def __init__(self, start: Cursor | None) -> None:
        self.position = start
        self.segments: deque[Segment] = deque()

    def add(self, segment: Segment) -> None:
        self.segments.append(segment)

    def advance(self) -> Cursor | None:
        """Pop settled segments at the head; returns the new position if it moved."""
        moved = False
        while self.segments and self.segments[0].settled:
            self.position = self.segments.popleft().end
            moved = True
        return self.position if moved else None


class Ranges:
    """A set of half-open cursor ranges (start, end]; a start of None means "from the
    beginning". Invariant: ranges are kept sorted, disjoint and non-adjacent; `contains` is a
    binary search."""

    def __init__(self, ranges: Iterable[tuple[Cursor | None, Cursor]]) -> None:
        self.starts: list[Cursor | None] = []
        self.ends: list[Cursor] = []
        for start, end in _merged(ranges):
            self.starts.append(start)
            self.ends.append(end)

    def __len__(self) -> int:
        return len(self.ends)

    def contains(self, cursor: Cursor) -> bool:
        """Whether start < cursor <= end for one of the ranges."""
        k = bisect_left(self.ends, cursor)  # first range whose end >= cursor
        if k == len(self.ends):
            return False
        start = self.starts[k]
        return start is None or start < cursor


def _merged(ranges: Iterable[tuple[Cursor | None, Cursor]]
            ) -> list[tuple[Cursor | None, Cursor]]:
    ordered = sorted(((s, e) for s, e in ranges if s is None or s < e),
                     key=lambda r: (r[0] is not None, r[0] or (), r[1]))
    out: list[tuple[Cursor | None, Cursor]] = []
    for start, end in ordered:
        if out and (start is None or out[-1][1] >= start):
            prev_start, prev_end = out[-1]
            out[-1] = (prev_start, max(prev_end, end))
        else:
            out.append((start, end))
    return out


def encode_cursor(cursor: Sequence[Any] | None) -> str | None:
    """A cursor tuple → JSON text; datetimes are tagged so they decode to the same type."""
    if cursor is None:
        return None
    return _encoded(cursor)


def encode_cursors(cursors: Iterable[Sequence[Any]]) -> list[str]:
    """`encode_cursor` of each cursor, the same text."""
    return [_encoded(cursor) for cursor in cursors]


def _encoded(cursor: Sequence[Any]) -> str:
    """`json.dumps` of the tagged values, the same text; tuples of only text, whole numbers
    and datetimes (most cursors and keys) are joined directly (much faster than `json`, and a
    run encodes a few for every request it journals)."""
    parts: list[str] = []
    for v in cursor:
        kind = type(v)
        if kind is str:
            parts.append(_quoted(v))
        elif kind is int:
            parts.append(str(v))
        elif kind is datetime:  # isoformat is ASCII that JSON needs no escape for
            parts.append('{"dt": "' + v.isoformat() + '"}')
        else:
            return json.dumps([_enc(x) for x in cursor])
    return "[" + ", ".join(parts) + "]"


def decode_cursor(text: str | None) -> Cursor | None:
    if text is None:
        return None
    return tuple(_dec(v) for v in json.loads(text))


def _enc(value: Any) -> Any:
    if value is NULL_KEY:
        return {"null": True}
    if isinstance(value, datetime):
        return {"dt": value.isoformat()}
    if isinstance(value, date):
        return {"d": value.isoformat()}
    if isinstance(value, Decimal):
        return {"dec": str(value)}
    return value


def _dec(value: Any) -> Any:
    if isinstance(value, dict):
        if "null" in value:
            return NULL_KEY
        if "dt" in value:
            return datetime.fromisoformat(value["dt"])
        if "d" in value:
            return date.fromisoformat(value["d"])
        if "dec" in value:
            return Decimal(value["dec"])
    return value
