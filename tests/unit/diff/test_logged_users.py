"""The Bloom filter of users whose fields wait in the record's log: no false negatives, and
false positives rare enough that a fold is rarely made for nothing."""

from __future__ import annotations

import os

from engage_sync.diff.logged_users import CAPACITY, KeyFilter


def _keys(n: int) -> list[bytes]:
    blob = os.urandom(16 * n)
    return [blob[i:i + 16] for i in range(0, 16 * n, 16)]


def test_every_added_key_is_held_and_clear_forgets_them() -> None:
    f = KeyFilter()
    added = _keys(50_000)
    assert not any(f.may_hold(added))
    f.add(added)
    assert all(f.may_hold(added))
    assert f.count == 50_000 and not f.full
    f.clear()
    assert not any(f.may_hold(added)) and f.count == 0


def test_false_positives_at_capacity_are_rare() -> None:
    f = KeyFilter()
    for _ in range(CAPACITY // 65_536):
        f.add(_keys(65_536))
    assert f.full
    wrong = sum(f.may_hold(_keys(200_000)))
    assert wrong <= 2  # expected about 0.02 at 1e-7 per key


def test_duplicated_keys_in_one_add() -> None:
    f = KeyFilter()
    key = _keys(1)
    f.add(key * 5)
    assert f.may_hold(key) == [True]
    assert f.may_hold([]) == []


def test_a_filter_takes_its_memory_at_the_first_key_only() -> None:
    """A run that logs no user never fills or clears the 8 MiB of bits."""
    empty = KeyFilter()
    assert empty.may_hold([bytes(16)]) == [False]
    empty.clear()
    assert empty.bits is None
    empty.add([bytes(16)])
    assert empty.bits is not None and empty.may_hold([bytes(16)]) == [True]
    empty.clear()
    assert empty.may_hold([bytes(16)]) == [False]
