"""A snapshot run's leavers the service acknowledged, by key, kept as the run's `left`
outcomes (`state.leave_checks.record_leavers`) for the write-back.

Invariants: only pending rows tagged left inside the run's cleanly acknowledged ranges, its
rejected rows left out (the journal decides, as for the snapshot's advance); recording them
again (a resumed run, a stop then a close) is a no-op. There are at most `max_leaves` of them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.config.integration import Integration
from engage_sync.snapshot import leavers as lv
from engage_sync.snapshot.advance import RANGES_A_STATEMENT, acked_pairs, acked_where
from engage_sync.snapshot.layout import CHANGE, LEFT, SEQ, Layout
from engage_sync.state.leave_checks import record_leavers
from engage_sync.state.store import StateStore


def acked_leavers(state: StateStore, engine: Engine, layout: Layout, run_id: str
                  ) -> pa.Table:
    """The numbers and identifiers of the run's acknowledged leavers, in order."""
    pairs, skipped = acked_pairs(state, run_id)
    p = layout.pending()
    seq = p.c[SEQ]
    found: list[Any] = []
    with engine.connect() as conn:
        for k in range(0, len(pairs), RANGES_A_STATEMENT):
            acked = acked_where(seq, pairs[k:k + RANGES_A_STATEMENT], skipped)
            found += conn.execute(sa.select(seq, *(p.c[c] for c in layout.ids)).where(
                acked, p.c[CHANGE] == LEFT).order_by(seq)).all()
    names = [SEQ, *layout.ids]
    return pa.table({n: pa.array([r[i] for r in found]) for i, n in enumerate(names)})


def record(state: StateStore, engine: Engine, model: Integration, layout: Layout,
           run_id: str) -> None:
    """Keep the run's acknowledged leavers as its `left` outcomes."""
    if model.on_leave == "keep":
        return
    rows = acked_leavers(state, engine, layout, run_id)
    record_leavers(state.engine, run_id, model.name, lv.left_rows(model, layout, rows),
                   lv.REASONS[model.on_leave])
