"""What incremental runs sent, row by row, for a backfill of events.

A backfill of a kind that is not idempotent (events, purchases) must not send again what an
incremental run sent, yet must send a row written late into a stretch an incremental run
already covered (its `UPDATED_AT` is below the incremental cursor, so no incremental run will
ever read it). The rule: a row is taken as sent when its row key is among the keys of a
journal entry of an incremental (or full-resync) run that was acknowledged, is in doubt or was
left pending (the journal keeps each exact request's keys). Entries journaled without keys
(grouped journals, or an older version) fall back to their whole range, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engage_sync.cursor.progress import Cursor, Ranges


class SentRows:
    """Row keys sent by incremental runs, and ranges known only as a whole."""

    def __init__(self, keys: Iterable[str],
                 ranges: Iterable[tuple[Cursor | None, Cursor]]) -> None:
        self.keys = frozenset(keys)
        self.ranges = Ranges(ranges)

    def contains(self, cursor: Cursor, key: str) -> bool:
        return key in self.keys or (len(self.ranges) > 0 and self.ranges.contains(cursor))

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[Cursor | None, Cursor, Any]]) -> SentRows:
        """From journal entries (start, end, list of keys or None)."""
        keys: list[str] = []
        ranges: list[tuple[Cursor | None, Cursor]] = []
        for start, end, entry_keys in entries:
            if entry_keys is None:
                ranges.append((start, end))
            else:
                keys.extend(entry_keys)
        return cls(keys, ranges)
