"""A Bloom filter of user keys (`state.field_codec.user_key`: 16 bytes of a 128-bit hash). Pure.

Invariants:
- `may_hold` is True for every key `add`ed since the last `clear` (no false negatives);
- a key never added is reported with probability about (1 - e^(-K·n/BITS))^K for n keys
  added: 1e-7 at n = 1,000,000, so a batch of 10,000 keys is wrongly flagged once in a
  thousand batches. The keys are uniform hashes already, so their two 64-bit halves serve as
  the two hashes of double hashing.
- memory is fixed: BITS / 8 bytes (8 MiB), whatever the number of keys, taken at the first
  `add` (a run that logs no user, as most short runs, never fills or clears 8 MiB).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BITS = 1 << 26
K = 7
CAPACITY = 1 << 20
"""Keys after which the filter should be emptied (its owner folds the record and clears)."""

_STEPS = np.arange(K, dtype=np.uint64)


def _positions(keys: Sequence[bytes]) -> np.ndarray:
    """(len(keys), K) bit positions of each key."""
    halves = np.frombuffer(b"".join(keys), dtype="<u8").reshape(-1, 2)
    first, step = halves[:, :1], halves[:, 1:] | np.uint64(1)
    return (first + _STEPS * step) & np.uint64(BITS - 1)  # wraps modulo 2**64: fine


class KeyFilter:
    def __init__(self) -> None:
        self.bits: np.ndarray | None = None
        self.count = 0

    def add(self, keys: Sequence[bytes]) -> None:
        if not keys:
            return
        if self.bits is None:
            self.bits = np.zeros(BITS // 8, dtype=np.uint8)
        at = _positions(keys).ravel()
        np.bitwise_or.at(self.bits, at >> np.uint64(3),
                         np.left_shift(1, at & np.uint64(7)).astype(np.uint8))
        self.count += len(keys)

    def may_hold(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key: whether it may have been added."""
        if not keys or not self.count or self.bits is None:
            return [False] * len(keys)
        at = _positions(keys)
        hit = (self.bits[at >> np.uint64(3)] >> (at & np.uint64(7)).astype(np.uint8)) & 1
        return hit.all(axis=1).tolist()

    def clear(self) -> None:
        if self.count and self.bits is not None:
            self.bits[:] = 0
        self.count = 0

    @property
    def full(self) -> bool:
        return self.count >= CAPACITY
