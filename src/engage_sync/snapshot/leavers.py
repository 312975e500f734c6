"""The leave check of a cursor integration, its pure parts: who left (the users of the last
check the source no longer holds), what engage-sync set on each, and the leavers as the
pending rows of a snapshot run, so the snapshot path's kind sends them.

Invariants:
- the comparison runs in DuckDB in process over the two Arrow tables (an anti join on the
  identifier columns, compared as text), never row by row in Python;
- a leaver's attributes to clear are those its field record holds a value of (a digest other
  than that of NULL), and only those: attributes other tools wrote are in no record of ours;
  a user with none is no leaver (nothing of ours to remove);
- the pending rows are numbered 1… in the identifiers' order, tagged `left`, their attribute
  columns NULL (a removal each, where their `send` column says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from engage_sync.config.integration import Integration
from engage_sync.diff.field_diff import slot_of, value_digest
from engage_sync.kinds.arrow_values import Columns
from engage_sync.kinds.track_rows import row_keys
from engage_sync.snapshot.layout import CHANGE, LEFT, SEQ, Layout
from engage_sync.state.field_codec import decode


def _names(ids: Sequence[str]) -> list[str]:
    return [f'"{c}"' for c in ids]


def gone(before: pa.Table | None, now: pa.Table, ids: Sequence[str]) -> pa.Table:
    """The rows of `before` whose identifiers `now` does not hold, in identifier order (none
    before a first check)."""
    if before is None or before.num_rows == 0:
        return now.schema.empty_table()
    con = duckdb.connect()
    try:
        con.register("engage_before", before)
        con.register("engage_now", now)
        same = " AND ".join(f"CAST(b.{c} AS VARCHAR) = CAST(n.{c} AS VARCHAR)"
                            for c in _names(ids))
        order = ", ".join(f"b.{c}" for c in _names(ids))
        return con.sql(f"SELECT b.* FROM engage_before b WHERE NOT EXISTS (SELECT 1 FROM "
                       f"engage_now n WHERE {same}) ORDER BY {order}").to_arrow_table()
    finally:
        con.close()


def joined(now: pa.Table, leavers: pa.Table) -> pa.Table:
    """The users to remember after a check: the source's, and the leavers (a leaver whose
    removal is acknowledged has no record left, so the next check drops it)."""
    if leavers.num_rows == 0:
        return now
    return pa.concat_tables([now, leavers.select(now.column_names).cast(now.schema)])


def set_by_us(record: bytes | None, names: Sequence[str]) -> list[bool]:
    """Per attribute name: whether the user's field record holds a value of ours for it."""
    if record is None:
        return [False] * len(names)
    held = decode(record)
    return [slot_of(n) in held and held[slot_of(n)] != value_digest(n, None) for n in names]


def pending_rows(leavers: pa.Table, layout: Layout, masks: Sequence[Sequence[bool]],
                 held: int) -> pa.Table:
    """The leavers with something of ours to remove, as pending rows of `layout` (the
    snapshot's layout of the integration); `held`: the users the check compared them with,
    kept in the schema's metadata for the cap."""
    keep = [k for k, m in enumerate(masks) if any(m)]
    rows = leavers.take(pa.array(keep, pa.int64()))
    n = rows.num_rows
    cols: dict[str, pa.Array] = {SEQ: pa.array(range(1, n + 1), pa.int64()),
                                 CHANGE: pa.array([LEFT] * n, pa.string())}
    for c in layout.ids:
        cols[c] = rows.column(c).combine_chunks()
    for a in layout.attributes:
        cols[a.column] = pa.nulls(n, pa.string())
        cols[a.digest] = pa.nulls(n, pa.string())
    for k, a in enumerate(layout.attributes):
        cols[a.send] = pa.array([masks[i][k] for i in keep], pa.bool_())
    return pa.table(cols).replace_schema_metadata({"held": str(held)})


def left_rows(model: Integration, layout: Layout, rows: pa.Table
              ) -> list[tuple[tuple[Any, ...], str]]:
    """Per pending row: its position (number, then identifiers) and its row key."""
    if rows.num_rows == 0:
        return []
    batch = rows.combine_chunks().to_batches()[0]
    keys = row_keys(Columns(batch), model.key_columns, model.hidden_key_columns, rows.num_rows)
    ids = [rows.column(c).to_pylist() for c in layout.ids]
    seqs = rows.column(SEQ).to_pylist()
    return [((seq, *(col[k] for col in ids)), keys[k]) for k, seq in enumerate(seqs)]


REASONS = {"clear": "left the source: the attributes engage-sync set were removed",
           "delete": "left the source: the user was deleted"}


def held_of(pending: pa.Table) -> int:
    return int((pending.schema.metadata or {}).get(b"held", b"0"))
