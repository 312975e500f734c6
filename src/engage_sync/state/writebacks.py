"""Write-backs to the user's warehouse: which runs are written, which wait for the next run,
and a run's outcome rows (part of `StateStore`, a mixin using only `self.engine`).

Invariants:
- a run is `written` once its record and its outcome rows are in the warehouse; a failed
  write-back is `pending`, with its error (no value, no secret), and the integration's next
  run tries it again;
- a run's outcome rows are the row errors of the run and of its partitions' runs, each with
  the key values kept with it (`row_errors.key_values`) and the retry state of its request;
  one per row: a row named possibly doubled (`duplicate`) and also failed or in doubt at the
  same position is one outcome, the failed or in-doubt one, its reason saying both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.cursor.null_keys import NULL_KEY
from engage_sync.cursor.progress import decode_cursor
from engage_sync.state.records import now
from engage_sync.state.row_errors import request_of
from engage_sync.state.schema import retries, row_errors, runs, upsert, writebacks

PENDING, WRITTEN = "pending", "written"
CHUNK = 5000


@dataclass(frozen=True, slots=True)
class OutcomeRow:
    """One row error of a run, as the write-back needs it: never a payload value."""

    kind: str
    row_key: str
    key_values: tuple[Any, ...] | None
    reason: str
    tries: int | None
    retry_state: str | None
    recorded_at: datetime


class Writebacks:
    """The StateStore's methods for the write-back."""

    engine: Engine

    def runs_to_write_back(self, integration: str, finished_since: datetime) -> list[str]:
        """Run ids to write back, oldest first: the integration's own runs (a partition's are
        its parent's) that ended at or after `finished_since` and are not written yet, and
        those whose write-back is pending."""
        written = sa.select(writebacks.c.run_id).where(writebacks.c.state == WRITTEN)
        pending = sa.select(writebacks.c.run_id).where(
            writebacks.c.integration == integration, writebacks.c.state == PENDING)
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs.c.run_id).where(
                runs.c.integration == integration, runs.c.job_status != "running",
                sa.or_(sa.and_(runs.c.sync_finish_time >= finished_since,
                               runs.c.run_id.not_in(written)),
                       runs.c.run_id.in_(pending))).order_by(runs.c.seq)).all()
        return [r.run_id for r in rows]

    def mark_written_back(self, run_id: str, integration: str) -> None:
        self._mark(run_id, integration, WRITTEN, None)

    def mark_writeback_pending(self, run_id: str, integration: str, error: str) -> None:
        """Remember a failed write-back for the next run, with its error."""
        self._mark(run_id, integration, PENDING, error[:1000])

    def writeback_state(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(writebacks).where(
                writebacks.c.run_id == run_id)).mappings().first()
        return None if row is None else dict(row)

    def _mark(self, run_id: str, integration: str, state: str, error: str | None) -> None:
        with self.engine.begin() as conn:
            tries = conn.scalar(sa.select(writebacks.c.tries).where(
                writebacks.c.run_id == run_id)) or 0
            upsert(conn, writebacks, [{
                "run_id": run_id, "integration": integration, "state": state,
                "tries": tries + 1, "error": error, "updated_at": now()}],
                update=("state", "tries", "error", "updated_at"))

    def outcome_rows(self, run_id: str) -> Iterator[list[OutcomeRow]]:
        """The row errors of a run and of its partitions' runs, one per row, in chunks."""
        with self.engine.connect() as conn:
            ids = [run_id, *conn.scalars(sa.select(runs.c.run_id).where(
                runs.c.scope == run_id))]
            states = _retry_states(conn, ids)
            result = conn.execution_options(yield_per=CHUNK).execute(sa.select(
                row_errors.c.run_id, row_errors.c.kind, row_errors.c.position,
                row_errors.c.row_key, row_errors.c.reason, row_errors.c.key_values,
                row_errors.c.recorded_at,
                sa.case((row_errors.c.kind.in_(HELD_BACK), _same_row(["duplicate"])
                         .limit(1).scalar_subquery())).label("doubled"),
            ).where(row_errors.c.run_id.in_(ids), sa.not_(sa.and_(
                row_errors.c.kind == "duplicate", sa.exists(_same_row(HELD_BACK)))))
                .order_by(row_errors.c.run_id, row_errors.c.kind, row_errors.c.position))
            for chunk in result.partitions(CHUNK):
                yield [_outcome(r, states) for r in chunk]


HELD_BACK = ("failed", "in_doubt")
"""The kinds that say how a row's request ended; a `duplicate` only adds that it was resent."""


def _same_row(kinds: Sequence[str]) -> sa.Select[tuple[str]]:
    """The reasons of the row errors of `kinds` at the same run and position as the row error
    selected (a correlated subquery: the table's key, so one index lookup)."""
    other = row_errors.alias("same_row")
    return sa.select(other.c.reason).where(
        other.c.run_id == row_errors.c.run_id, other.c.kind.in_(list(kinds)),
        other.c.position == row_errors.c.position)


def _retry_states(conn: sa.Connection, run_ids: Sequence[str]
                  ) -> dict[tuple[str, int], tuple[int, str]]:
    rows = conn.execute(sa.select(retries.c.run_id, retries.c.req_no, retries.c.tries,
                                  retries.c.state).where(retries.c.run_id.in_(list(run_ids))))
    return {(r.run_id, r.req_no): (r.tries, r.state) for r in rows}


def _outcome(r: Any, states: dict[tuple[str, int], tuple[int, str]]) -> OutcomeRow:
    req_no = request_of(r.position) if r.kind != "unmapped" else None
    tries, state = states.get((r.run_id, req_no), (None, None)) if req_no is not None \
        else (None, None)
    reason = f"{r.reason}; {r.doubled}" if r.doubled else r.reason
    return OutcomeRow(r.kind, r.row_key, _values(r.key_values), reason, tries, state,
                      r.recorded_at)


def _values(text: str | None) -> tuple[Any, ...] | None:
    """Key values as stored → Python values (a NULL key value → None)."""
    if text is None:
        return None
    return tuple(None if v is NULL_KEY else v for v in decode_cursor(text) or ())
