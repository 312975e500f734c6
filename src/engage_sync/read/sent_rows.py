"""What incremental runs sent, row by row, for a backfill of events.

A backfill of a kind that is not idempotent (events, purchases) must not send again what an
incremental run sent, yet must send a row written late into a stretch an incremental run
already covered (its `UPDATED_AT` is below the incremental cursor, so no incremental run will
ever read it). The rule: a row is taken as sent when its row key is among the keys of a
journal entry of an incremental (or full-resync) run that was acknowledged, is in doubt or was
left pending (the journal keeps each exact request's keys). Entries journaled without keys
(grouped journals, or an older version) fall back to their whole range, as before.

Every key ever sent is held, so the set is kept small: a 128-bit hash of each key
(`SentKeys`, 16 bytes a key in sorted arrays, 32 while they are built, where a set of the keys
took about 130), built from the journal's entries a bounded number at a time. Two different
keys share a hash with a probability of about n² / 2^129 (1e-23 for 50M keys sent and 50M
read): the cost of one would be a row taken as sent and not sent. The hash is seeded at random
in each process, so nobody who writes the source's keys can aim at a collision.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import numpy as np
import xxhash

from engage_sync.cursor.progress import Cursor, Ranges

_DIGEST = xxhash.xxh3_128_digest
_CHUNK = 65_536  # keys hashed into one piece of the array being built


def _digests(keys: Iterable[str], seed: int) -> bytes:
    """Each key's 16-byte hash, joined. A key is any `str` the journal holds, a lone
    surrogate too (`surrogatepass`: distinct keys stay distinct bytes)."""
    digest = _DIGEST
    return b"".join([digest(key.encode("utf-8", "surrogatepass"), seed) for key in keys])


def _pieces(keys: Iterable[str], seed: int) -> Iterator[np.ndarray]:
    """The keys' digests as 16-byte strings, `_CHUNK` keys a piece."""
    it = iter(keys)
    while piece := list(islice(it, _CHUNK)):
        yield np.frombuffer(_digests(piece, seed), dtype="V16")


def _halves(digests: bytes | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """16-byte digests (joined bytes, or an array of them) → their first and second halves
    as native unsigned integers, whose order (first, then second) is the digests' byte
    order."""
    pairs = np.frombuffer(digests, dtype=">u8").reshape(-1, 2)
    return pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64)


class SentKeys:
    """A set of row keys held as their sorted 128-bit hashes: 16 bytes a key (32 while it is
    built, beside the entry being read).

    Invariant: `_high` is non-decreasing and, where two are equal, `_low` is too (the
    digests' byte order), so membership is a binary search on `_high` and a comparison of
    `_low` among the equal ones."""

    def __init__(self, keys: Iterable[str] = (), seed: int | None = None) -> None:
        self._seed = int.from_bytes(os.urandom(8), "little") if seed is None else seed
        pieces = list(_pieces(keys, self._seed))
        digests = np.concatenate(pieces) if pieces else np.empty(0, dtype="V16")
        del pieces
        digests.sort()  # in place, as 16-byte strings (memcmp): the order of the halves
        self._high, self._low = _halves(digests)  # then the digests themselves go

    def __len__(self) -> int:
        return len(self._high)

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key is in the set, in order. The keys are looked up in the order of
        their hashes, whose searches then walk the array in order and share its cached pages,
        where the keys' own order would jump across the whole array for each."""
        n = len(self._high)
        if not keys or not n:
            return [False] * len(keys)
        high, low = _halves(_digests(keys, self._seed))
        order = np.argsort(high, kind="stable")
        high, low = high[order], low[order]
        first = np.searchsorted(self._high, high, side="left")
        at = np.minimum(first, n - 1)
        same = self._high[at] == high
        found = same & (self._low[at] == low)
        after = np.minimum(first + 1, n - 1)
        for k in np.flatnonzero(same & ~found & (self._high[after] == high)):  # rare
            last = np.searchsorted(self._high, high[k], side="right")
            found[k] = bool(np.any(self._low[first[k]:last] == low[k]))
        out = np.empty_like(found)
        out[order] = found
        return out.tolist()


class SentRows:
    """Row keys sent by incremental runs, ranges known only as a whole, and `top`: the
    integration's cursor read just before them (rows above it are incremental runs' to send;
    at or below it, what they sent is all in the journal read after it)."""

    def __init__(self, keys: SentKeys, ranges: Iterable[tuple[Cursor | None, Cursor]],
                 top: Cursor | None = None) -> None:
        self.keys = keys
        self.ranges = Ranges(ranges)
        self.top = top

    def contains_many(self, rows: Sequence[tuple[Cursor, str]]) -> list[bool]:
        """Whether each (cursor, key) was sent: its key is known, or its cursor falls in a
        range known only as a whole."""
        found = self.keys.contains_many([key for _, key in rows])
        if len(self.ranges) > 0:
            return [hit or self.ranges.contains(cursor)
                    for hit, (cursor, _) in zip(found, rows, strict=True)]
        return found

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[Cursor | None, Cursor, Any]],
                     top: Cursor | None = None) -> SentRows:
        """From journal entries (start, end, list of keys or None), read one at a time (after
        `top` was): only the ranges of entries without keys are kept beside the keys'
        hashes."""
        ranges: list[tuple[Cursor | None, Cursor]] = []

        def keys() -> Iterable[str]:
            for start, end, entry_keys in entries:
                if entry_keys is None:
                    ranges.append((start, end))
                else:
                    yield from entry_keys

        sent = SentKeys(keys())  # reads every entry, so `ranges` is complete after it
        return cls(sent, ranges, top)


_SHARED_LOCK = threading.Lock()
_SHARED: weakref.WeakValueDictionary[Hashable, SentRows] = weakref.WeakValueDictionary()


def shared(key: Hashable, build: Callable[[], SentRows]) -> SentRows:
    """The `SentRows` this process holds under `key`, built by `build` if nobody holds one.

    The partitions of one backfill that run side by side in a process (Prefect's threads, a
    Dask worker's threads) each read what incremental runs sent, the same keys: they hold one
    copy instead of one each (a copy grows with the keys sent: `benchmarks/sent_keys_memory.py`,
    figures in benchmarks/README.md). A copy built for an earlier sibling
    is a snapshot older than a later one's start, but consistent with its own `top`, which
    the sibling uses with it: what an incremental run sent in between is above that `top`
    (but for a lookback's late rows, which any backfill may meet while it runs).
    Invariants: built once per key while anyone holds it (under one lock, not re-entrant: a
    caller waits for a build in progress, of any key, and `build` must not call `shared`); let
    go with its last holder (a run lets go of its copy when it ends), so the next backfill
    reads the journal afresh."""
    with _SHARED_LOCK:
        held = _SHARED.get(key)
        if held is None:
            held = build()
            _SHARED[key] = held
        return held
