"""Sets of half-open cursor ranges (start, end], for "was this row already sent?" (pure).

Invariant: after `merged`, ranges are sorted, disjoint and non-adjacent; `contains` is a
binary search. A start of None means "from the beginning".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

Cursor = tuple[Any, ...]


class Ranges:
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
