"""What of a snapshot run the service acknowledged, as its journal and row errors say: the
ranges of the source order its requests covered, and the rows in them that were not sent.

Invariants: a range is kept only for a request acknowledged with no item failing (a request
with a failed item is left out whole: its other users are sent again, never one lost);
ranges that touch are merged; a rejected row lies inside some request's range, so its
position is handed back to be left out. Read only after the run's requests are settled.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.cursor.progress import Cursor, Ranges, decode_cursor
from engage_sync.state.schema import journal, row_errors, runs

_TIE = re.compile(r"#\d+$")


def acknowledged(engine: Engine, run_id: str) -> tuple[Ranges, list[Cursor]]:
    """(the merged ranges (start, end] of the run's cleanly acknowledged requests, the
    positions of its rejected rows)."""
    with engine.connect() as conn:
        entries = conn.execute(sa.select(journal.c.start_cursor, journal.c.end_cursor).where(
            journal.c.run_id == run_id, journal.c.state == "acked",
            sa.func.coalesce(journal.c.failed, 0) == 0)).all()
        rejects = conn.execute(sa.select(row_errors.c.position).where(
            row_errors.c.run_id == run_id, row_errors.c.kind == "rejected")).scalars().all()
    ranges = Ranges((decode_cursor(s), decode_cursor(e) or ()) for s, e in entries)
    positions = [decode_cursor(_TIE.sub("", p)) or () for p in rejects]
    return ranges, [p for p in positions if p]


def record_left(engine: Engine, run_id: str, left: int) -> None:
    """The run's leavers the service acknowledged (set, not added: every attempt of the run
    counts them all over again from the journal)."""
    with engine.begin() as conn:
        conn.execute(runs.update().where(runs.c.run_id == run_id).values(rows_left=left))
