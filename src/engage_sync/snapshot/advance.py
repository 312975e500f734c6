"""The snapshot moved on over what the service acknowledged: the pending rows inside the run's
acknowledged ranges (`state.snapshot_marks`), rejected rows left out, replace their users'
snapshot rows (a leaver's row is removed), in one warehouse transaction.

Invariants: only the journal decides what advances, so applying after a kill, on resume, or
twice gives the same snapshot (each user's row is deleted, then inserted from its pending
row); a pending row not acknowledged (failed, in doubt, never sent) leaves its user's
snapshot row as it was, so the next run compares it again and sends it.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.errors import SourceError
from engage_sync.read.extract import first_line
from engage_sync.snapshot.layout import CHANGE, LEFT, ROW, SEQ, Layout
from engage_sync.state.snapshot_marks import acknowledged, record_left
from engage_sync.state.store import StateStore

log = logging.getLogger(__name__)

RANGES_A_STATEMENT = 200  # OR-ed ranges per statement: a run with many failures splits them


def advance(state: StateStore, engine: Engine, layout: Layout, run_id: str) -> int:
    """Apply the run's acknowledged pending rows to the snapshot; returns how many ranges.
    Raises SourceError when the warehouse refuses."""
    ranges, rejected = acknowledged(state.engine, run_id)
    if not len(ranges):
        return 0
    pairs = [(s[0] if s else None, e[0]) for s, e in zip(ranges.starts, ranges.ends,
                                                          strict=True)]
    skipped = sorted({p[0] for p in rejected})
    left = 0
    try:
        with engine.begin() as conn:
            for k in range(0, len(pairs), RANGES_A_STATEMENT):
                left += _apply(conn, layout, pairs[k:k + RANGES_A_STATEMENT], skipped)
    except sa.exc.SQLAlchemyError as exc:
        raise SourceError(
            f"integration {layout.integration}: the snapshot could not be moved on in the "
            f"warehouse: {first_line(exc)}; the next run compares those users again and "
            "sends them once more") from exc
    record_left(state.engine, run_id, left)
    log.info("integration %s: the snapshot moved on over the acknowledged users",
             layout.integration)
    return len(pairs)


def _apply(conn: sa.Connection, layout: Layout, pairs: list[tuple[Any, Any]],
           skipped: list[int]) -> int:
    """Apply one chunk of ranges; returns the leavers in it."""
    p, s = layout.pending().alias("engage_p"), layout.snapshot()
    seq = p.c[SEQ]
    acked: sa.ColumnElement[bool] = sa.or_(*(
        sa.and_(seq <= hi, *([seq > lo] if lo is not None else [])) for lo, hi in pairs))
    if skipped:
        acked = sa.and_(acked, seq.not_in(skipped))
    left = conn.execute(sa.select(sa.func.count()).select_from(p).where(
        acked, p.c[CHANGE] == LEFT)).scalar_one()
    same = sa.and_(*(s.c[c] == p.c[c] for c in layout.ids))
    conn.execute(s.delete().where(sa.select(sa.literal(1)).select_from(p).where(
        same, acked).exists()))
    kept = [*layout.ids, ROW, *(a.digest for a in layout.attributes)]
    conn.execute(s.insert().from_select(kept, sa.select(*(p.c[c] for c in kept)).where(
        acked, p.c[CHANGE] != LEFT, *(p.c[c].is_not(None) for c in layout.ids))))
    return int(left)
