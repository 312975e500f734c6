"""The snapshot's advance cut into transactions of bounded size (`snapshot.advance.chunked`)."""

from __future__ import annotations

import random

from engage_sync.snapshot.advance import Pair, chunked


def covered(pairs: list[Pair]) -> set[int]:
    return {n for lo, hi in pairs for n in range(1 if lo is None else lo + 1, hi + 1)}


def test_one_range_is_cut_into_groups_of_at_most_the_rows_given() -> None:
    groups = list(chunked([(None, 120)], rows=50, ranges=200))
    assert groups == [[(None, 50)], [(50, 100)], [(100, 120)]]


def test_small_ranges_share_a_group_up_to_the_rows_and_the_ranges_given() -> None:
    assert list(chunked([(0, 10), (20, 30), (40, 50)], rows=25, ranges=200)) == [
        [(0, 10), (20, 30), (40, 45)], [(45, 50)]]
    assert list(chunked([(0, 10), (20, 30), (40, 50)], rows=100, ranges=2)) == [
        [(0, 10), (20, 30)], [(40, 50)]]


def test_the_groups_cover_exactly_the_ranges_within_their_bounds() -> None:
    rng = random.Random(7)
    for _ in range(200):
        pairs: list[Pair] = []
        at = rng.randrange(0, 5)
        for k in range(rng.randrange(1, 8)):
            lo = at + rng.randrange(0, 20)
            hi = lo + rng.randrange(1, 300)
            pairs.append((None if k == 0 and lo == 0 else lo, hi))
            at = hi
        rows, ranges = rng.randrange(1, 120), rng.randrange(1, 4)
        groups = list(chunked(pairs, rows, ranges))
        assert all(len(g) <= ranges and len(covered(g)) <= rows for g in groups)
        assert sorted(n for g in groups for n in covered(g)) == sorted(covered(pairs))
