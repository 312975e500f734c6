"""Properties of packing (batches never break a limit and lose or duplicate no item) and of
progress (the cursor never moves backwards and never passes an unsettled segment)."""

from __future__ import annotations

import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from engage_sync.cursor.progress import Progress, Ranges, Segment
from engage_sync.items import Item
from engage_sync.kinds.track_packer import ARRAYS, TrackLimits, pack_track

blobs = st.builds(lambda n, s: orjson.dumps({"external_id": f"u{n}", "v": "x" * s}),
                  st.integers(0, 10**6), st.integers(0, 3000))
items = st.lists(st.tuples(st.sampled_from(ARRAYS), blobs), max_size=400).map(
    lambda xs: [Item(seq, str(seq), f"u{seq % 7}", arr, blob)
                for seq, (arr, blob) in enumerate(xs)])
limits = st.builds(TrackLimits, objects_per_request=st.sampled_from([1, 50, 75]),
                   per_array=st.booleans(),
                   max_body_bytes=st.sampled_from([20_000, 100_000, 4_000_000]))


@settings(max_examples=200, deadline=None)
@given(items, limits)
def test_batches_never_break_a_limit_and_lose_or_duplicate_no_item(
    given_items: list[Item], lim: TrackLimits
) -> None:
    batches = list(pack_track(given_items, lim))
    flat = [i.seq for b in batches for i in b.items]
    assert flat == [i.seq for i in given_items]  # every item once, in order
    for b in batches:
        body = orjson.loads(b.body)
        assert len(b.body) <= lim.max_body_bytes
        counts = {a: len(body.get(a, [])) for a in ARRAYS}
        if lim.per_array:
            assert max(counts.values()) <= lim.objects_per_request
        else:
            assert sum(counts.values()) <= lim.objects_per_request
        # positions point at the very object each item was serialized to
        for item, (array, index) in zip(b.items, b.positions, strict=True):
            assert orjson.dumps(body[array][index]) == item.blob


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2000), st.sampled_from([50, 75]))
def test_small_items_fill_requests_to_the_object_limit(n: int, per: int) -> None:
    its = [Item(k, str(k), "u", "attributes", b'{"external_id":"u"}') for k in range(n)]
    batches = list(pack_track(its, TrackLimits(objects_per_request=per)))
    assert len(batches) == math.ceil(n / per)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=60), st.randoms())
def test_progress_never_moves_backwards_nor_past_an_unsettled_segment(
    kinds: list[int], rnd: object
) -> None:
    import random

    assert isinstance(rnd, random.Random)
    progress = Progress(None)
    segments = []
    for k, settled in enumerate(kinds):
        seg = Segment(start=(k,) if k else None, end=(k + 1,), settled=bool(settled))
        segments.append(seg)
        progress.add(seg)
    order = list(range(len(segments)))
    rnd.shuffle(order)
    last = None
    for k in order:
        segments[k].settled = True
        moved = progress.advance()
        if moved is not None:
            assert last is None or moved > last
            last = moved
            first_unsettled = next((s for s in segments if not s.settled), None)
            assert first_unsettled is None or moved <= first_unsettled.start
    assert last == (len(segments),)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=30),
       st.integers(-5, 80))
def test_ranges_membership_matches_the_intervals(spans: list[tuple[int, int]], x: int) -> None:
    intervals = [((s,), (s + w,)) for s, w in spans]
    expected = any(s < (x,) <= e for s, e in intervals)
    assert Ranges(intervals).contains((x,)) == expected
