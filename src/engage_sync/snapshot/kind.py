"""The kind of a snapshot run's pending rows: each row one /users/track attributes object, of
only the attributes its `send` columns name. Pure.

Invariants: a row becomes exactly one Item or one Reject (the attributes kind's own transform
and checks, so a value is written as a cursor run writes it); an item keeps its identifier
and update flag, and only the attributes sent are billed (`points`); a left user's attributes
are NULL, which the service takes as removals. Its journal is exact (no group commits): a
request is journaled as it leaves and settled with the next, so a killed run sends again only
the requests in flight at the kill, never acknowledged ones whose settles waited for a group.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from engage_sync.config.integration import Integration
from engage_sync.diff.field_diff import identifier_of
from engage_sync.items import Item, TransformResult, json_blob
from engage_sync.kinds import Kind
from engage_sync.kinds.identity import DELETE_LISTS, delete_packer
from engage_sync.kinds.track import attribute_columns, packer, user_column
from engage_sync.kinds.track_packer import ENDPOINT
from engage_sync.kinds.track_transform import transform_batch
from engage_sync.pack.batching import Batch, Packer
from engage_sync.snapshot.layout import CHANGE, LEFT, Layout


def pending_kind(layout: Layout, on_leave: str = "keep") -> Kind:
    """The attributes kind, reading `layout`'s pending table; with `on_leave: delete`, a
    leaver is one identifier of a /users/delete request instead."""
    names = [a.name for a in layout.attributes]
    sends = [a.send for a in layout.attributes]
    deletes = on_leave == "delete"

    def columns(integration: Integration) -> list[str]:
        return [*attribute_columns(integration), *sends, CHANGE]

    def transform(integration: Integration, batch: pa.RecordBatch, first_seq: int
                  ) -> TransformResult:
        whole = transform_batch(integration, batch, first_seq)
        masks = [batch.column(s).to_pylist() for s in sends]
        left = batch.column(CHANGE).to_pylist() if deletes else []
        items = [_deleted(item) if deletes and left[item.seq - first_seq] == LEFT else
                 _reduced(item, [n for n, m in zip(names, masks, strict=True)
                                 if m[item.seq - first_seq]], names)
                 for item in whole.items]
        return TransformResult(items, whole.rejects)

    def packers(integration: Integration) -> Packer:
        return Routed(packer(integration), delete_packer(integration))

    return Kind(name="attributes", rank=40, idempotent=True, columns=columns,
                transform=transform, packer=packers if deletes else packer,
                endpoint=lambda _: ENDPOINT, user_column=user_column)


def _deleted(item: Item) -> Item:
    """A leaver's item as one identifier to delete (no data point)."""
    kind = identifier_of(item.user)
    value = orjson.loads(item.blob)[kind]
    return Item(item.seq, item.key, item.user, DELETE_LISTS[kind], json_blob(value))


class Routed:
    """Attributes objects to one packer, identifiers to delete to the other, in order: a
    request is cut when the item's endpoint changes (leavers come last, so once)."""

    def __init__(self, track: Packer, deletes: Packer) -> None:
        self.track, self.deletes = track, deletes
        self.current: Packer | None = None

    def add(self, item: Item) -> Batch | None:
        target = self.track if item.array == "attributes" else self.deletes
        done = self.current.flush() if self.current not in (None, target) else None
        self.current = target
        full = target.add(item)
        assert done is None or full is None, "a fresh packer never returns a batch"
        return done or full

    def flush(self) -> Batch | None:
        return self.current.flush() if self.current is not None else None


def _reduced(item: Item, sent: list[str], names: list[str]) -> Item:
    """The item with only the attributes in `sent`; as it is when that is every one."""
    if len(sent) == len(names):
        return item
    keep = set(sent)
    every = set(names)
    obj = {k: v for k, v in orjson.loads(item.blob).items() if k not in every or k in keep}
    return Item(item.seq, item.key, item.user, item.array, json_blob(obj), item.group,
                len(sent))
