"""Requests as every packer yields them, and the packer for list-shaped endpoints (pure).

`Batch` is a request body for one endpoint and the items in it, with their (input_array,
index) positions; its rate-limit group follows from the endpoint (`request.group_for`).
`Packer` is the protocol every kind's packer follows.

`ListPacker` invariants (property-tested): items stay in the order given and each is in
exactly one batch; a batch holds a contiguous run of the items (the pipeline maps each batch
to a range of the source order); a batch never holds more than `limit` items, never two items
`compatible` says apart, and never two items sharing a `conflicts` key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from engage_sync.items import Item
from engage_sync.pack.request import group_for


@dataclass(frozen=True, slots=True)
class Batch:
    """Items of one request, in order, and the request body built from their blobs."""

    items: tuple[Item, ...]
    positions: tuple[tuple[str, int], ...]
    body: bytes
    endpoint: str

    @property
    def group(self) -> str:
        """The endpoint's rate-limit group."""
        return group_for(self.endpoint)


class Packer(Protocol):
    """Packs items in order. `add` returns a finished batch when the item does not fit the
    current one (the item then starts the next); `flush` returns what is pending."""

    def add(self, item: Item) -> Batch | None: ...

    def flush(self) -> Batch | None: ...


Built = tuple[bytes, tuple[tuple[str, int], ...]]


def build_arrays(items: list[Item], always: tuple[str, ...] = ()) -> Built:
    """`{"<array>": [blobs...], ...}`: arrays in first-appearance order (those in `always`
    first, even when empty); positions index into each array."""
    order = list(always)
    by_array: dict[str, list[bytes]] = {a: [] for a in always}
    positions = []
    for item in items:
        blobs = by_array.get(item.array)
        if blobs is None:
            blobs = by_array[item.array] = []
            order.append(item.array)
        positions.append((item.array, len(blobs)))
        blobs.append(item.blob)
    body = b"{" + b",".join(
        b'"' + a.encode() + b'":[' + b",".join(by_array[a]) + b"]" for a in order) + b"}"
    return body, tuple(positions)


class ListPacker:
    """Sequential packer for list-shaped endpoints.

    A batch is cut before an item when the batch holds `limit` items, when `compatible(first,
    item)` is False (for example another identifier kind), or when the item shares a
    `conflicts` key with an item already in the batch (for example the same user).
    """

    def __init__(
        self,
        endpoint: str,
        limit: int,
        build: Callable[[list[Item]], Built],
        *,
        compatible: Callable[[Item, Item], bool] = lambda a, b: True,
        conflicts: Callable[[Item], Iterable[str]] = lambda item: (),
    ) -> None:
        if limit < 1:
            raise ValueError("a packer needs limit >= 1")
        group_for(endpoint)  # an endpoint without a rate-limit group is a programming error
        self.endpoint = endpoint
        self.limit, self.build = limit, build
        self.compatible, self.conflicts = compatible, conflicts
        self.pending: list[Item] = []
        self.seen: set[str] = set()

    def add(self, item: Item) -> Batch | None:
        keys = set(self.conflicts(item))
        done = None
        if self.pending and (len(self.pending) >= self.limit
                             or not self.compatible(self.pending[0], item)
                             or not keys.isdisjoint(self.seen)):
            done = self.flush()
        self.pending.append(item)
        self.seen |= keys
        return done

    def flush(self) -> Batch | None:
        if not self.pending:
            return None
        items, self.pending, self.seen = self.pending, [], set()
        body, positions = self.build(items)
        return Batch(items=tuple(items), positions=positions, body=body,
                     endpoint=self.endpoint)
