"""The snapshot moved on over what the service acknowledged: the pending rows inside the run's
acknowledged ranges (`state.snapshot_marks`), rejected rows left out, replace their users'
snapshot rows (a leaver's row is removed).

Invariants: only the journal decides what advances, so applying after a kill, on resume, or
twice gives the same snapshot (each user's row is deleted, then inserted from its pending
row, in one transaction); a pending row not acknowledged (failed, in doubt, never sent) leaves
its user's snapshot row as it was, so the next run compares it again and sends it. The
acknowledged rows are applied in transactions of at most `ROWS_A_TRANSACTION` pending rows,
each followed on DuckDB by a checkpoint (`read.duckdb_memory.give_back`): DuckDB holds what
committed transactions changed in memory until a checkpoint writes it out, and the advance of
a large change in one go outgrew its memory limit. A failure partway keeps the parts already
committed: the next run sends only the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.errors import SourceError
from engage_sync.read.duckdb_memory import give_back
from engage_sync.read.extract import first_line
from engage_sync.snapshot.layout import CHANGE, LEFT, ROW, SEQ, Layout
from engage_sync.state.snapshot_marks import acknowledged, record_left
from engage_sync.state.store import StateStore

log = logging.getLogger(__name__)

RANGES_A_STATEMENT = 200  # OR-ed ranges per statement: a run with many failures splits them
ROWS_A_TRANSACTION = 50_000

Pair = tuple[int | None, int]
"""An acknowledged range of pending numbers: (after, up to and including]; None: from the
first."""


def acked_pairs(state: StateStore, run_id: str) -> tuple[list[Pair], list[int]]:
    """The run's acknowledged ranges of pending numbers, and its rejected rows' numbers."""
    ranges, rejected = acknowledged(state.engine, run_id)
    pairs = [(s[0] if s else None, e[0]) for s, e in zip(ranges.starts, ranges.ends,
                                                          strict=True)]
    return pairs, sorted({p[0] for p in rejected})


def acked_where(seq: sa.ColumnElement[Any], pairs: Sequence[Pair], skipped: Sequence[int]
                ) -> sa.ColumnElement[bool]:
    """The pending numbers inside `pairs`, the `skipped` ones left out."""
    inside = sa.or_(*(sa.and_(seq <= hi, *([seq > lo] if lo is not None else []))
                      for lo, hi in pairs))
    return sa.and_(inside, seq.not_in(skipped)) if skipped else inside


def chunked(pairs: Sequence[Pair], rows: int, ranges: int) -> Iterator[list[Pair]]:
    """`pairs` cut and grouped so that each group covers at most `rows` numbers in at most
    `ranges` ranges; together the groups cover exactly what `pairs` cover. Pure."""
    group: list[Pair] = []
    held = 0
    for lo, hi in pairs:
        start = 0 if lo is None else lo
        while start < hi:
            end = min(hi, start + rows - held)
            group.append((None if lo is None and start == 0 else start, end))
            held += end - start
            start = end
            if held >= rows or len(group) >= ranges:
                yield group
                group, held = [], 0
    if group:
        yield group


def advance(state: StateStore, engine: Engine, layout: Layout, run_id: str) -> int:
    """Apply the run's acknowledged pending rows to the snapshot; returns how many ranges.
    Raises SourceError when the warehouse refuses."""
    pairs, skipped = acked_pairs(state, run_id)
    if not pairs:
        return 0
    left = 0
    try:
        for group in chunked(pairs, ROWS_A_TRANSACTION, RANGES_A_STATEMENT):
            with engine.connect() as conn:
                with conn.begin():
                    left += _apply(conn, layout, group, skipped)
                give_back(conn)
    except sa.exc.SQLAlchemyError as exc:
        raise SourceError(
            f"integration {layout.integration}: the snapshot could not be moved on in the "
            f"warehouse: {first_line(exc)}; the next run compares those users again and "
            "sends them once more") from exc
    record_left(state.engine, run_id, left)
    log.info("integration %s: the snapshot moved on over the acknowledged users",
             layout.integration)
    return len(pairs)


def _apply(conn: sa.Connection, layout: Layout, pairs: list[Pair], skipped: list[int]) -> int:
    """Apply one group of ranges; returns the leavers in it."""
    p, s = layout.pending().alias("engage_p"), layout.snapshot()
    acked = acked_where(p.c[SEQ], pairs, skipped)
    left = conn.execute(sa.select(sa.func.count()).select_from(p).where(
        acked, p.c[CHANGE] == LEFT)).scalar_one()
    same = sa.and_(*(s.c[c] == p.c[c] for c in layout.ids))
    conn.execute(s.delete().where(sa.select(sa.literal(1)).select_from(p).where(
        same, acked).exists()))
    kept = [*layout.ids, ROW, *(a.digest for a in layout.attributes)]
    conn.execute(s.insert().from_select(kept, sa.select(*(p.c[c] for c in kept)).where(
        acked, p.c[CHANGE] != LEFT, *(p.c[c].is_not(None) for c in layout.ids))))
    return int(left)
