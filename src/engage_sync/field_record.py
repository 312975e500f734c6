"""The field record's SQL: look up, merge and forget what the service acknowledged per user.

Called by `state.StateStore` only, inside its transactions (so a record is written in the same
transaction that settles the requests it comes from). Invariants:
- a lookup is one query per 500 users (a batch's users, never one query per row);
- `merge` applies deltas in the order given on top of what is stored: an attribute is recorded
  only from an object the service acknowledged, and an acknowledgement never erases the
  record of an attribute the object did not carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engage_sync.field_diff import decode, encode, merged, user_key
from engage_sync.state_schema import fields, upsert

CHUNK = 500


def lookup(conn: Connection, integration: str, keys: Iterable[bytes]) -> dict[bytes, bytes]:
    """user key → stored digests blob, for the given keys that have a record."""
    unique = list(dict.fromkeys(keys))
    found: dict[bytes, bytes] = {}
    for i in range(0, len(unique), CHUNK):
        rows = conn.execute(sa.select(fields.c.user_key, fields.c.digests).where(
            fields.c.integration == integration,
            fields.c.user_key.in_(unique[i:i + CHUNK])))
        found.update((bytes(r[0]), bytes(r[1])) for r in rows)
    return found


def merge(conn: Connection, integration: str, deltas: Sequence[tuple[str, bytes]]) -> None:
    """Record (user, encoded delta) pairs, in order, on top of the stored digests."""
    if not deltas:
        return
    keyed = [(user_key(user), decode(blob)) for user, blob in deltas]
    stored = lookup(conn, integration, (k for k, _ in keyed))
    out = {k: decode(v) for k, v in stored.items()}
    for key, delta in keyed:
        out[key] = merged(out.get(key), delta)
    upsert(conn, fields, [{"integration": integration, "user_key": k, "digests": encode(d)}
                          for k, d in out.items()], update=("digests",))


def forget(conn: Connection, integration: str) -> int:
    """Drop an integration's whole record; returns the number of users forgotten."""
    return int(conn.execute(fields.delete().where(fields.c.integration == integration)).rowcount)
