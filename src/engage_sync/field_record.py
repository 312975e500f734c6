"""The field record's SQL: look up, merge and forget what the service acknowledged per user.

Called by `state.StateStore` only, inside its transactions (so a record is written in the same
transaction that settles the requests it comes from). Invariants:
- a lookup is one query per 500 users (a batch's users, never one query per row);
- `merge` applies deltas in the order given on top of what is stored: an attribute is recorded
  only from an object the service acknowledged, and an acknowledgement never erases the
  record of an attribute the object did not carry. A *fresh* delta (`FRESH`: the user had no
  record when its batch was looked up, and no item of the run was pending for it) is the
  user's whole record, written without reading: nothing else can have recorded the user
  since, because a later item of the same user is diffed against it and settles after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy.engine import Connection

from engage_sync.field_diff import Digests, decode, encode, merged, user_key
from engage_sync.state_schema import fields

CHUNK = 900  # bind parameters per lookup: under SQLite's oldest limit (999)
FRESH, MERGE = b"F", b"M"  # the first byte of `Item.fields`


def lookup(conn: Connection, integration: str, keys: Iterable[bytes]) -> dict[bytes, bytes]:
    """user key → stored digests blob, for the given keys that have a record.

    Here and in `merge`, plain SQL with the driver's placeholders (SQLite and PostgreSQL both
    know `ON CONFLICT`): compiling a 900-value IN list, or an executemany of thousands of
    rows, through SQLAlchemy costs as much as the database's own work."""
    unique = list(dict.fromkeys(keys))
    found: dict[bytes, bytes] = {}
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    for i in range(0, len(unique), CHUNK):
        chunk = unique[i:i + CHUNK]
        sql = (f"SELECT user_key, digests FROM {fields.name} WHERE integration = {mark} "
               f"AND user_key IN ({', '.join([mark] * len(chunk))})")
        rows = conn.exec_driver_sql(sql, (integration, *chunk))
        found.update((bytes(r[0]), bytes(r[1])) for r in rows)
    return found


def merge(conn: Connection, integration: str, deltas: Sequence[tuple[str, bytes]]) -> None:
    """Record (user, `FRESH` or `MERGE` + encoded delta) pairs, in order, on top of the stored
    digests (a fresh delta replaces them, as it is: no decoding)."""
    if not deltas:
        return
    keyed = [(user_key(user), blob) for user, blob in deltas]
    stored = lookup(conn, integration, (k for k, blob in keyed if blob[:1] != FRESH))
    out: dict[bytes, bytes | Digests] = dict(stored)
    for key, blob in keyed:
        if blob[:1] == FRESH:
            out[key] = blob[1:]
        else:
            last = out.get(key)
            out[key] = merged(decode(last) if isinstance(last, bytes) else last,
                              decode(blob[1:]))
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    conn.exec_driver_sql(
        f"INSERT INTO {fields.name} (integration, user_key, digests) VALUES ({mark}, {mark}, "
        f"{mark}) ON CONFLICT (integration, user_key) DO UPDATE SET digests = excluded.digests",
        [(integration, k, v if isinstance(v, bytes) else encode(v)) for k, v in out.items()])


def forget(conn: Connection, integration: str) -> int:
    """Drop an integration's whole record; returns the number of users forgotten."""
    return int(conn.execute(fields.delete().where(fields.c.integration == integration)).rowcount)
