"""How the field record stores a user: the record's key of a user, and one user's digests as
bytes. Pure.

A user's record is a map attribute slot → value digest (`diff.field_diff` makes them), stored
as one compact blob (`encode`, 12 bytes per attribute) under a 16-byte hash of the user
reference, so the state database holds neither a value nor an identifier. Stored blobs must
decode the same in every release (tests/unit/diff/test_field_diff.py checks known digests).
"""

from __future__ import annotations

import struct

import xxhash

Digests = dict[int, int]
"""One user's record: attribute slot → value digest."""


def user_key(user: str) -> bytes:
    """The record's key of a user reference (`Item.user`): 16 bytes of a 128-bit hash, so the
    state database holds no identifier either."""
    return xxhash.xxh3_128_digest(user.encode("utf-8"))


def _layout(n: int) -> struct.Struct:
    layout = _LAYOUTS.get(n)
    if layout is None:
        layout = _LAYOUTS[n] = struct.Struct(f"<{n}I{n}Q")
    return layout


_LAYOUTS: dict[int, struct.Struct] = {}


def encode(digests: Digests) -> bytes:
    """slot → digest as bytes: every slot (4 bytes each), then every digest (8 bytes each),
    little-endian."""
    return _layout(len(digests)).pack(*digests.keys(), *digests.values())


def encode_slots(slots: list[int], digests: list[int]) -> bytes:
    """`encode` of the record whose slots and digests are given as two lists of one length
    (the hot path of a first run: no map is built)."""
    return _layout(len(slots)).pack(*slots, *digests)


def decode(blob: bytes) -> Digests:
    """The inverse of `encode`; raises ValueError on a blob `encode` cannot have made."""
    n, rest = divmod(len(blob), 12)
    if rest:
        raise ValueError(f"a field record of {len(blob)} bytes is not a multiple of 12")
    values = _layout(n).unpack(blob)
    return dict(zip(values[:n], values[n:], strict=True))


def merged(last: Digests | None, delta: Digests) -> Digests:
    """The record after `delta` was acknowledged on top of `last`."""
    if not last:
        return dict(delta)
    out = dict(last)
    out.update(delta)
    return out
