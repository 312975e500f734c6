"""The cursor rule (progress.py), the skipping of settled ranges on resume (resume.Skipper) and
the cutting of the source order into segments (cutter.py), without I/O."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engage_sync.cursor.progress import (
    Progress,
    Segment,
    _enc,
    decode_cursor,
    encode_cursor,
    encode_cursors,
    may_move_cursor,
    stamp,
)
from engage_sync.items import Item
from engage_sync.pack.batching import Batch
from engage_sync.read.reader import RowBatch
from engage_sync.run.cutter import Cutter
from engage_sync.run.resume import Skipper
from engage_sync.run.settlement import Outgoing
from engage_sync.state.records import JournalEntry


def test_progress_moves_only_over_the_settled_prefix() -> None:
    progress = Progress((0,))
    first, second, third = Segment((0,), (1,)), Segment((1,), (2,)), Segment((2,), (3,))
    for s in (first, second, third):
        progress.add(s)
    second.settled = third.settled = True
    assert progress.advance() is None and progress.position == (0,)  # the head is unsettled
    first.settled = True
    assert progress.advance() == (3,)
    assert progress.advance() is None  # nothing moved since


@pytest.mark.parametrize(("mode", "stored", "position", "moves"), [
    ("incremental", None, (1, "a"), True),
    ("incremental", (1, "a"), (1, "b"), True),
    ("incremental", (1, "b"), (1, "a"), False),  # never backwards (lookback re-reads below)
    ("incremental", (1, "a"), (1, "a"), False),
    ("full_resync", (5, "z"), (2, "a"), False),  # a full resync never lowers the cursor
    ("full_resync", (5, "z"), (6, "a"), True),
    ("backfill", None, (9, "a"), False),  # a backfill never moves it
])
def test_the_integration_cursor_never_moves_backwards(
    mode: Any, stored: Any, position: Any, moves: bool
) -> None:
    assert may_move_cursor(mode, stored, position) is moves


@given(st.lists(st.one_of(
    st.integers(), st.text(max_size=5), st.none(), st.booleans(),
    st.datetimes(timezones=st.just(UTC)), st.datetimes(), st.dates(),
    st.decimals(allow_nan=False, allow_infinity=False)), max_size=4))
def test_a_cursor_decodes_to_the_same_values_and_types(values: list[Any]) -> None:
    decoded = decode_cursor(encode_cursor(values))
    assert decoded == tuple(values)
    assert [type(v) for v in decoded or ()] == [type(v) for v in values]


_KEY_VALUES = st.one_of(st.integers(), st.text(max_size=6), st.booleans(), st.none(),
                        st.floats(allow_nan=False), st.datetimes(timezones=st.just(UTC)))


@given(st.lists(st.lists(_KEY_VALUES, max_size=3).map(tuple), max_size=5))
def test_cursors_encoded_together_are_the_text_each_encodes_to_alone(
    cursors: list[tuple[Any, ...]]
) -> None:
    # the journal's key values are compared with texts encode_cursor wrote (row errors, retries)
    assert encode_cursors(cursors) == [encode_cursor(c) for c in cursors]


@given(st.lists(st.one_of(
    _KEY_VALUES, st.datetimes(), st.dates(), st.text(alphabet=st.characters(), max_size=4),
    st.datetimes(timezones=st.timezones()),
    st.decimals(allow_nan=False, allow_infinity=False)), max_size=4))
def test_a_cursor_is_encoded_to_the_very_text_json_dumps_wrote(values: list[Any]) -> None:
    """Texts written by earlier releases are compared with new ones: the direct joining of
    text, whole numbers and datetimes must not change a character."""
    assert encode_cursor(values) == json.dumps([_enc(v) for v in values])


def test_stamps_sort_like_their_times_whatever_the_zone() -> None:
    t = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    later = (t + timedelta(microseconds=1)).astimezone(
        datetime.now().astimezone().tzinfo)
    assert stamp(t) < stamp(later)
    assert stamp(t) == stamp(t.replace(tzinfo=None))
    assert stamp(date(2026, 3, 1)) == "2026-03-01"
    assert stamp(Decimal("1.5")) == "1.5"


def entry(req_no: int, start: int | None, end: int) -> JournalEntry:
    return JournalEntry(req_no, None if start is None else (start,), (end,), 1, "acked")


def test_the_skipper_answers_in_source_order_whatever_the_journal_order() -> None:
    # a resumed run's journal refills gaps: request 3 covers (2, 4], request 1 (4, 6]
    skipper = Skipper([entry(3, 2, 4), entry(1, 4, 6), entry(2, None, 0)], start=(0,))
    assert skipper.settled((1,)) is None  # (None, 0] ends at the window's start
    assert skipper.settled((2,)) is None  # 2 is not inside (2, 4]
    hit = skipper.settled((3,))
    assert hit is not None and hit.req_no == 3
    hit = skipper.settled((5,))
    assert hit is not None and hit.req_no == 1
    assert skipper.settled((7,)) is None and not skipper


class Packs:
    """A packer that cuts a request every `size` items."""

    def __init__(self, size: int) -> None:
        self.size, self.pending = size, []  # type: list[Item]

    def add(self, item: Item) -> Batch | None:
        done = self.flush() if len(self.pending) >= self.size else None
        self.pending.append(item)
        return done

    def flush(self) -> Batch | None:
        if not self.pending:
            return None
        items, self.pending = tuple(self.pending), []
        return Batch(items, tuple(("x", k) for k in range(len(items))), b"{}", "/users/track")


def rows_of(n: int) -> RowBatch:
    import pyarrow as pa

    return RowBatch([pa.array(list(range(1, n + 1)))], n)


def item(seq: int) -> Item:
    return Item(seq, f"k{seq}", f"u{seq}", "attributes", b"{}")


@given(st.lists(st.booleans(), min_size=1, max_size=40), st.integers(1, 5))
def test_segments_are_contiguous_and_cover_every_row_read(
    is_item: list[bool], size: int
) -> None:
    """Rows 1..n, each an item or a reject: requests and settled stretches chain from the
    window's start to the last row, and a reject is covered by the request before it."""
    progress = Progress(None)
    sent: list[Outgoing] = []

    def submit(segment: Outgoing, req_no: int) -> None:
        assert req_no == len(sent) + 1
        progress.add(segment)
        sent.append(segment)

    cutter = Cutter(Packs(size), progress, submit, None, 0, lookback=False)
    rows = rows_of(len(is_item))
    for k, flag in enumerate(is_item):
        if flag:
            cutter.add(rows, k, item(k))
        else:
            cutter.passed(rows, k)
    cutter.finish()
    segments = list(progress.segments)
    assert segments[0].start is None and segments[-1].end == (len(is_item),)
    for a, b in itertools.pairwise(segments):
        assert a.end == b.start
    assert [i.seq for s in sent for i in (s.batch.items if s.batch else ())] == \
        [k for k, flag in enumerate(is_item) if flag]
    for s in sent:  # a request ends at or after its last item's row
        assert s.batch is not None and s.end >= (s.batch.items[-1].seq + 1,)


def test_a_settled_stretch_cuts_the_request_being_packed() -> None:
    progress, sent = Progress(None), []  # type: Progress, list[Outgoing]
    cutter = Cutter(Packs(10), progress, lambda s, n: (progress.add(s), sent.append(s)),
                    None, 4, lookback=False)
    rows = rows_of(6)
    cutter.add(rows, 0, item(0))
    cutter.add(rows, 1, item(1))
    cutter.skip((2,), (5,))  # rows 3..5 were settled by an earlier attempt
    cutter.add(rows, 5, item(5))
    cutter.finish()
    assert [(s.start, s.end) for s in progress.segments] == [
        (None, (2,)), ((2,), (5,)), ((5,), (6,))]
    assert [s.entry for s in sent] == [None, None]  # the send loop fills in journal entries
    assert progress.segments[1].settled and not progress.segments[0].settled
