"""Items and rejects: the plain data that flows from a kind's transform to its packer.

Invariants:
- an `Item` is one object of one request array, serialized once (`blob`), and knows the source
  row it came from (`seq`, the row's position in the run's ordered stream) and its `key`;
- a `Reject` is a row that broke a rule of the spec, with the row key and a human reason; it
  never carries payload values;
- `seq` numbers rows of one window in (cursor, key) order, starting at 0 for the first row read
  after the window's start cursor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, TypeVar, dataclass_transform

import orjson

_T = TypeVar("_T")


def json_blob(obj: Any) -> bytes:
    """`obj` as compact JSON, in a bytes object of its own size: orjson's result keeps the
    oversized buffer it wrote into, and the thousands of items a run holds in flight would
    each carry one (and fragment the heap, which slows every allocation after). Raises
    orjson.JSONEncodeError (a TypeError) for a value JSON cannot hold."""
    return bytes(memoryview(orjson.dumps(obj)))


@dataclass_transform(frozen_default=True)
def record(cls: type[_T]) -> type[_T]:
    """A frozen dataclass to the type checker, which refuses any assignment to a field, and
    a plain slotted one at run time, hashed by its fields as a frozen one is. A row makes one
    or two of these on the hot path, and a frozen dataclass's `__init__` costs several times a
    plain one's (it sets each field through `object.__setattr__`)."""
    make: Callable[[type[_T]], Any] = dataclass(slots=True, unsafe_hash=True)
    return make(cls)


@record
class Item:
    """One object destined for one request array.

    `group` is the packing key of kinds that group rows into shared objects (for
    subscriptions: (subscription_group_id, subscription_state)); empty for /users/track.
    `user` names the user the item touches; an item touching several users (a merge) joins
    their names with USER_SEP. Two requests sharing a user are never in flight at once.
    `points`: the billed data points of the object (attribute keys but the identifier and the
    update flag; 1 for an event or a purchase; 0 for kinds the service does not bill).
    `fields`: with the field-level diff, the digests to record for `user` once the service
    acknowledged the object (`field_record.FRESH` or `MERGE`, then `field_diff.encode`);
    empty otherwise.
    """

    seq: int
    key: str
    user: str
    array: str
    blob: bytes
    group: tuple[str, ...] = ()
    points: int = 0
    fields: bytes = b""


USER_SEP = "\x1e"


def users_of(item: Item) -> tuple[str, ...]:
    return tuple(item.user.split(USER_SEP))


@record
class Reject:
    """A source row refused before sending, with the reason (never the offending value)."""

    seq: int
    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class TransformResult:
    items: list[Item] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)


KEY_PART_MAX = 64


def key_part(value: object) -> str:
    """One row-key value of a declared key column as text: None → '', datetime/date →
    ISO 8601, other values → str; text longer than KEY_PART_MAX characters → its digest."""
    if value is None:
        return ""
    text = value.isoformat() if isinstance(value, date) else str(value)
    if len(text) > KEY_PART_MAX:
        return _sha1(text)
    return text


def digest_part(value: object) -> str:
    """A key part that holds payload (the payload format's PAYLOAD column): always its digest,
    whatever its length, so no payload value reaches an error, an artifact or a log; None → ''."""
    if value is None:
        return ""
    return _sha1(value.isoformat() if isinstance(value, date) else str(value))


def _sha1(text: str) -> str:
    return "sha1:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def render_key(values: Iterable[object], hidden: Container[int] = ()) -> str:
    """The row key shown to users and stored with rejects: key parts joined by '|'; the parts
    at the positions in `hidden` (payload columns) are digests, never values."""
    return "|".join(digest_part(v) if n in hidden else key_part(v)
                    for n, v in enumerate(values))


class Unchanged:
    """The outcome of a row a stage found needs no sending (the field diff: nothing changed):
    nothing is sent, but the row is passed (the cursor moves over it)."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged()


RowOutcome = Item | tuple[str, str] | Unchanged | None
"""What one row read becomes: an item to send, a (row key, reason) reject, UNCHANGED (passed),
or None (dropped: it needs no sending and is not counted)."""
