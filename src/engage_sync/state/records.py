"""The plain records the state store hands out and takes: a run's counts, a journal entry, a
request's settlement; and the clock every write of the store stamps its rows with (UTC).

No SQL here: these are values, built by the store's modules and by their callers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any


def now() -> datetime:
    """The time the store writes on its rows: timezone-aware, in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class RunCounts:
    synced: int = 0
    failed: int = 0
    in_doubt: int = 0
    rejected: int = 0
    unmapped: int = 0
    """Service errors that named no item of their request (not rows: not in the row counts)."""
    duplicated: int = 0
    """Rows that may have reached the service twice (also counted by how they ended)."""


def summed(counts: Iterable[RunCounts]) -> RunCounts:
    """The counts of several runs together (a parent's, from its partitions')."""
    listed = list(counts)
    return RunCounts(**{f.name: sum(getattr(c, f.name) for c in listed)
                        for f in fields(RunCounts)})


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A request's place in the source order: rows with start < cursor <= end."""

    req_no: int
    start: tuple[Any, ...] | None
    end: tuple[Any, ...]
    items: int
    state: str = "pending"
    keys: tuple[str, ...] | None = None
    """The row keys of its items (exact journals), to name them if it is left in flight."""
    key_values: tuple[str | None, ...] | None = None
    """With `keys`: each item's key values as they are in the source (JSON, or None)."""


@dataclass(frozen=True, slots=True)
class Settlement:
    """How a journaled request ended: rows synced, failed and in doubt (position, key, reason)."""

    req_no: int
    state: str
    synced: int
    failed: Sequence[tuple[str, str, str]] = ()
    in_doubt: Sequence[tuple[str, str, str]] = ()
    reason: str | None = None
    unmapped: Sequence[tuple[str, str, str]] = ()
    """Errors of the answer that name no item: (position, "request N", reason)."""
    duplicated: Sequence[tuple[str, str, str]] = ()
    """Rows sent again after a doubtful attempt, that may be doubled (`deliver.doubled`)."""
    key_values: Mapping[str, str | None] = field(default_factory=dict)
    """The key values (JSON) of the rows above, by position (`row_errors.key_values`)."""
