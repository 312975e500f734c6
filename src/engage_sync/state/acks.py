"""Lookback acks: (row key, stamp, digest) of the rows the service acknowledged, per
integration, so a re-read of the lookback period sends only what was not acknowledged.

Part of `StateStore` (a mixin using only `self.engine`). Acks are written by `insert_acks` in the
transaction that settles their requests (or by `record_acks`); one key keeps its latest digest.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.state.schema import acks, upsert


def insert_acks(conn: Connection, integration: str,
                rows: Sequence[tuple[str, str, str]]) -> None:
    values = [{"integration": integration, "row_key": k, "stamp": s, "digest": d}
              for k, s, d in rows]
    upsert(conn, acks, values, update=("digest",))


class Acks:
    """The StateStore's methods for lookback acks."""

    engine: Engine

    def record_acks(self, integration: str, rows: Sequence[tuple[str, str, str]]) -> None:
        with self.engine.begin() as conn:
            insert_acks(conn, integration, rows)

    def acked(self, integration: str, keys: Sequence[str]) -> set[tuple[str, str, str]]:
        """(row key, stamp, digest) of the given keys' acknowledged rows."""
        found: set[tuple[str, str, str]] = set()
        unique = list(dict.fromkeys(keys))
        with self.engine.connect() as conn:
            for i in range(0, len(unique), 500):
                rows = conn.execute(sa.select(acks.c.row_key, acks.c.stamp, acks.c.digest).where(
                    acks.c.integration == integration, acks.c.row_key.in_(unique[i:i + 500])))
                found.update((r[0], r[1], r[2]) for r in rows)
        return found

    def prune_acks(self, integration: str, before_stamp: str) -> int:
        with self.engine.begin() as conn:
            return conn.execute(acks.delete().where(
                acks.c.integration == integration, acks.c.stamp < before_stamp)).rowcount
