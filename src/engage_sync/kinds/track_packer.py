"""Packing /users/track requests (pure): attributes, events and purchases, as full as the
limits allow.

Invariants (checked by property tests):
- every item given is in exactly one request, in the order given;
- a request never holds more objects than `objects_per_request` in total (or per array, with
  `per_array`), and its body is never longer than `max_body_bytes`;
- a request is cut only when the next item would break a limit, so requests are full: the
  number of requests is the minimum for the item order given.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from engage_sync.items import Item
from engage_sync.pack.batching import Batch

ARRAYS = ("attributes", "events", "purchases")
_OVERHEAD = len(b'{"attributes":[],"events":[],"purchases":[]}')
ENDPOINT = "/users/track"


@dataclass(frozen=True, slots=True)
class TrackLimits:
    objects_per_request: int = 75
    per_array: bool = False
    max_body_bytes: int = 4_000_000


class TrackPacker:
    """Incremental greedy packer: `add` returns a full batch when the item does not fit the
    current one (the item then starts the next), `flush` returns what is pending."""

    def __init__(self, limits: TrackLimits) -> None:
        self.limits = limits
        self._max_objects = limits.objects_per_request
        self._max_bytes = limits.max_body_bytes
        self._reset()

    def _reset(self) -> None:
        self.pending: list[Item] = []
        self.counts = dict.fromkeys(ARRAYS, 0)
        self.size = _OVERHEAD

    def add(self, item: Item) -> Batch | None:
        """Raises ValueError for an item too large for any request (transform rejects those)."""
        blob_len = len(item.blob)
        if blob_len + _OVERHEAD > self._max_bytes:
            raise ValueError(f"row {item.key}: object of {blob_len} bytes fits no request")
        counts = self.counts
        in_array = counts[item.array]
        full = (in_array if self.limits.per_array else len(self.pending)) >= self._max_objects
        extra = blob_len + 1 if in_array else blob_len
        done = None
        if self.pending and (full or self.size + extra > self._max_bytes):
            done = self.flush()
            counts = self.counts
            extra = blob_len
        self.pending.append(item)
        counts[item.array] += 1
        self.size += extra
        return done

    def flush(self) -> Batch | None:
        if not self.pending:
            return None
        batch = build_track(self.pending)
        self._reset()
        return batch


def pack_track(items: Iterable[Item], limits: TrackLimits) -> Iterator[Batch]:
    """All items packed greedily, in order."""
    packer = TrackPacker(limits)
    for item in items:
        done = packer.add(item)
        if done is not None:
            yield done
    last = packer.flush()
    if last is not None:
        yield last


def build_track(items: list[Item]) -> Batch:
    """Body with only the arrays that have items; positions index into each array."""
    first = items[0].array
    if all(item.array == first for item in items):  # the common case: one kind per integration
        body = b'{"' + first.encode() + b'":[' + b",".join([i.blob for i in items]) + b"]}"
        return Batch(items=tuple(items), positions=tuple((first, k) for k in range(len(items))),
                     body=body, endpoint=ENDPOINT)
    by_array: dict[str, list[Item]] = {a: [] for a in ARRAYS}
    for item in items:
        by_array[item.array].append(item)
    parts = []
    positions: dict[int, tuple[str, int]] = {}
    for array in ARRAYS:
        group = by_array[array]
        if not group:
            continue
        parts.append(b'"' + array.encode() + b'":[' + b",".join(i.blob for i in group) + b"]")
        for index, item in enumerate(group):
            positions[id(item)] = (array, index)
    body = b"{" + b",".join(parts) + b"}"
    return Batch(items=tuple(items), positions=tuple(positions[id(i)] for i in items),
                 body=body, endpoint=ENDPOINT)
