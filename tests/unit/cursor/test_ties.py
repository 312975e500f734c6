"""Ties: rows sharing a whole position get distinct error positions, with
ordinals counted across batch boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engage_sync.cursor.ties import Ties
from engage_sync.state.row_errors import reject_position


@given(st.lists(st.integers(0, 3), max_size=40).map(sorted), st.lists(st.booleans(),
       max_size=40))
def test_ordinals_count_equal_positions_across_batches(values: list[int],
                                                       cuts: list[bool]) -> None:
    cursors = [(v,) for v in values]
    ties, got, start = Ties(), [], 0
    for k in range(1, len(cursors) + 1):  # cut into batches where `cuts` says
        if k == len(cursors) or (k - 1 < len(cuts) and cuts[k - 1]):
            batch = cursors[start:k]
            if k % 2:
                got += ties.number(batch)
            else:  # a batch whose ordinals nobody needs: only its tail is looked at
                ties.pass_over(batch.__getitem__, len(batch))
                got += [cursors[:start + j].count(c) for j, c in enumerate(batch)]
            start = k
    assert got == [cursors[:k].count(c) for k, c in enumerate(cursors)]
    positions = [reject_position(c, n) for c, n in zip(cursors, got, strict=True)]
    assert len(set(positions)) == len(positions)
