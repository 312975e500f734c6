"""Field-level diff of attribute objects against the digests the service last acknowledged. Pure.

What is remembered per (user, attribute) is a digest, never the value: an attribute's *slot* is
the low 32 bits of a 64-bit hash of its name, and its *digest* is a 64-bit hash of the value's
canonical JSON (sorted keys) seeded with the name's hash. A user's record is a map slot →
digest, stored as one compact blob (`encode`, 12 bytes per attribute).

Invariants (property-tested):
- the identifier key and `_update_existing_only` are kept in every object sent and are never
  diffed or billed; every other key is an attribute, billed once per object sent;
- with no record for the user (never sent, or forgotten; a full resync diffs against none),
  the object is sent whole and every attribute is recorded;
- otherwise only the attributes whose digest differs from the record (or that the record does
  not hold) are sent; an object none of whose attributes changed is not sent at all;
- an attribute the record does not hold whose value is NULL is not sent (nor billed): there
  is nothing of ours to remove, so a newly mapped column bills only its non-null rows;
- NULL is a value like any other: a value that becomes NULL is sent (as JSON null, which the
  service treats as a removal) once, then matches the record while it stays NULL;
- two names that share a slot overwrite each other's entry; since a digest is seeded with the
  whole name, that can only make an attribute be sent again, never be skipped wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import xxhash

from engage_sync.state.field_codec import Digests, decode, encode_slots

UPDATE_FLAG = "_update_existing_only"
_SORT = orjson.OPT_SORT_KEYS


_SEEDS: dict[str, int] = {}
_SEEDS_KEPT = 65_536  # names remembered (payload keys are open-ended): then forgotten at once


def name_seed(name: str) -> int:
    """The 64-bit hash of an attribute name: its slot (low 32 bits) and its digests' seed."""
    seed = _SEEDS.get(name)
    if seed is None:
        if len(_SEEDS) >= _SEEDS_KEPT:
            _SEEDS.clear()
        seed = _SEEDS[name] = xxhash.xxh3_64_intdigest(name.encode("utf-8"))
    return seed


def slot_of(name: str) -> int:
    return name_seed(name) & 0xFFFFFFFF


def value_digest(name: str, value: Any) -> int:
    """The digest of one attribute's value: canonical JSON, hashed with the name as seed."""
    return xxhash.xxh3_64_intdigest(orjson.dumps(value, option=_SORT), name_seed(name))


def identifier_of(user: str) -> str:
    """The identifier field of an attributes object, from its user reference ("kind:value")."""
    return user.split(":", 1)[0]


@dataclass(frozen=True, slots=True)
class Change:
    """The diff of one object.

    obj: what to send (None: nothing changed); `whole` when it is the object as given.
    delta: the digests to record once the service acknowledged `obj`.
    sent, saved: billed data points in `obj`, and those the diff left out.
    """

    obj: dict[str, Any] | None
    whole: bool
    delta: Digests
    sent: int
    saved: int


def diff(obj: dict[str, Any], identifier: str, last: Digests | None) -> Change:
    """Reduce `obj` to its identifier, its update flag and the attributes whose digest is not
    the one in `last` (see the module's invariants)."""
    if last is None:
        return _whole(obj, identifier)
    return _reduced(obj, identifier, *_digested(obj, identifier), last)


def _reduced(obj: dict[str, Any], identifier: str, slots: list[int], digests: list[int],
             last: Digests) -> Change:
    """`diff` with the object's attributes already digested (`_digested`, in its order)."""
    delta: Digests = {}
    reduced: dict[str, Any] = {}
    k = 0
    for name, value in obj.items():
        if name in (identifier, UPDATE_FLAG):
            reduced[name] = value
            continue
        slot, digest = slots[k], digests[k]
        k += 1
        held = last.get(slot)
        if held is None and value is None:
            continue
        if held != digest:
            delta[slot] = digest
            reduced[name] = value
    if not delta:
        return Change(None, False, delta, 0, k)
    return Change(reduced, len(delta) == k, delta, len(delta), k - len(delta))


def _whole(obj: dict[str, Any], identifier: str) -> Change:
    """The diff of an object sent whole: every attribute recorded."""
    slots, digests = _digested(obj, identifier)
    return Change(obj, True, dict(zip(slots, digests, strict=True)), len(slots), 0)


def whole_encoded(user: str, blob: bytes) -> bytes:
    """`encode` of the record of an object sent whole (its JSON `blob`, for the user reference
    `user`): every attribute's digest."""
    return whole_encoded_object(user, orjson.loads(blob))


def whole_encoded_object(user: str, obj: dict[str, Any]) -> bytes:
    """`whole_encoded` of the object already parsed. The hot path of a first run, so written
    for speed (two names sharing a slot give two entries; `decode` keeps the last, as `diff`
    does)."""
    slots, digests = _digested(obj, user[:user.find(":")])
    return encode_slots(slots, digests)


def _digested(obj: dict[str, Any], identifier: str) -> tuple[list[int], list[int]]:
    """The slot and the digest of each attribute, in the object's order."""
    slots: list[int] = []
    digests: list[int] = []
    hashed, dumps, seeds = xxhash.xxh3_64_intdigest, orjson.dumps, _SEEDS
    for name, value in obj.items():
        if name in (identifier, UPDATE_FLAG):
            continue
        seed = seeds.get(name) or name_seed(name)
        slots.append(seed & 0xFFFFFFFF)
        digests.append(hashed(dumps(value, option=_SORT), seed))
    return slots, digests


def diff_stored(obj: dict[str, Any], identifier: str, stored: bytes) -> Change:
    """`diff` against a record as stored (`encode`d), digesting each value once. An object
    whose record encodes to the very bytes stored (the same attributes in the same order,
    every digest equal: what an unchanged row gives) is unchanged without decoding them."""
    slots, digests = _digested(obj, identifier)
    if encode_slots(slots, digests) == stored:
        return Change(None, False, {}, 0, len(slots))
    return _reduced(obj, identifier, slots, digests, decode(stored))
