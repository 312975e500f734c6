"""Failed requests kept for later runs to send again (part of `StateStore`, a mixin using only
`self.engine`).

Invariants:
- a retry is one journaled request of one run that ended `failed`, or `in_doubt` when the run
  re-sends what is in doubt (`resend`); its rows are the request's range of the source order
  within that run's floor, before and partition, so re-reading the range finds those rows
  (less any whose `UPDATED_AT` moved on: later windows read them);
- recording is idempotent (keyed by run and request), so a resumed run records once;
- a retry past its tries is `parked`, never sent again; `close_retry` ends a pending one as
  `landed` (every row settled) or `retried` (some failed again: newer retries hold them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.cursor.progress import Cursor, decode_cursor, encode_cursor
from engage_sync.state.records import now
from engage_sync.state.schema import journal, retries, runs, upsert

PENDING, PARKED, LANDED, RETRIED = "pending", "parked", "landed", "retried"


@dataclass(frozen=True, slots=True)
class Retry:
    """One failed request to send again: where its rows are, and how many tries it had."""

    run_id: str
    req_no: int
    start: Cursor | None
    end: Cursor
    floor: Any
    before: Any
    partition: tuple[int, int] | None
    tries: int
    keys: frozenset[str] | None = None
    """The row keys of the request's items (exact journals): the only rows sent again. None
    (grouped journals: attributes) sends the range's rows, which the field diff reduces."""

    @property
    def scope(self) -> str:
        """The resume key of this retry's run (`RetryScope`)."""
        return f"retry:{self.run_id}:{self.req_no}"


@dataclass(frozen=True, slots=True)
class WindowBounds:
    """The bounds of the run's window a request's range lies in (kept with its retries)."""

    floor: Any = None
    before: Any = None
    partition: tuple[int, int] | None = None


class Retries:
    """The StateStore's methods for failed requests sent again by later runs."""

    engine: Engine

    def record_retries(self, run_id: str, integration: str, bounds: WindowBounds,
                       resend_in_doubt: bool, tries: int, max_tries: int) -> tuple[int, str]:
        """Keep this run's failed requests (and in-doubt ones when `resend_in_doubt`) as
        retries with `tries` tries, parked when `tries >= max_tries`. Returns how many, and
        the state they were kept in (PENDING or PARKED)."""
        states = ["failed", "in_doubt"] if resend_in_doubt else ["failed"]
        state = PARKED if tries >= max_tries else PENDING
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(
                journal.c.req_no, journal.c.start_cursor, journal.c.end_cursor,
                journal.c.reason, journal.c.item_keys).where(
                    journal.c.run_id == run_id, journal.c.state.in_(states))).all()
            at = now()
            upsert(conn, retries, [{
                "run_id": run_id, "req_no": r.req_no, "integration": integration,
                "start_cursor": r.start_cursor, "end_cursor": r.end_cursor,
                "floor": encode_cursor([bounds.floor]) if bounds.floor is not None else None,
                "before": encode_cursor([bounds.before]) if bounds.before is not None else None,
                "partition": _partition_text(bounds.partition), "tries": tries,
                "state": state, "reason": r.reason, "recorded_at": at,
                "item_keys": r.item_keys} for r in rows])
        return len(rows), state

    def pending_retries(self, integration: str) -> list[Retry]:
        """The integration's pending retries, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(retries).where(
                retries.c.integration == integration, retries.c.state == PENDING)
                .order_by(retries.c.recorded_at, retries.c.run_id, retries.c.req_no)).all()
        return [Retry(r.run_id, r.req_no, decode_cursor(r.start_cursor),
                      decode_cursor(r.end_cursor) or (), _first(r.floor), _first(r.before),
                      _partition(r.partition), r.tries,
                      None if r.item_keys is None else frozenset(json.loads(r.item_keys)))
                for r in rows]

    def finished_retry_run(self, integration: str, retry: Retry) -> str | None:
        """The id of a run of this retry that finished already (its retry was not closed:
        the process stopped in between), or None."""
        with self.engine.connect() as conn:
            found = conn.scalar(sa.select(runs.c.run_id).where(
                runs.c.integration == integration, runs.c.mode == "retry",
                runs.c.scope == retry.scope, runs.c.job_status != "running").limit(1))
        return None if found is None else str(found)

    def close_retry(self, retry: Retry, state: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(retries.update().where(
                retries.c.run_id == retry.run_id, retries.c.req_no == retry.req_no,
                retries.c.state == PENDING).values(state=state))

    def retry_states(self, run_ids: Sequence[str]) -> dict[tuple[str, int], tuple[int, str]]:
        """(run, request) → (tries, state) of the given runs' retries."""
        found: dict[tuple[str, int], tuple[int, str]] = {}
        unique = list(dict.fromkeys(run_ids))
        with self.engine.connect() as conn:
            for i in range(0, len(unique), 500):
                for r in conn.execute(sa.select(
                        retries.c.run_id, retries.c.req_no, retries.c.tries, retries.c.state)
                        .where(retries.c.run_id.in_(unique[i:i + 500]))):
                    found[(r.run_id, r.req_no)] = (r.tries, r.state)
        return found


def retry_note(tries: int, state: str) -> str:
    """What became of a failed row's request, for `engage-sync errors`."""
    return {PENDING: f"pending retry ({tries} {_tries(tries)} so far)",
            PARKED: f"parked after {tries} {_tries(tries)}",
            LANDED: f"landed when sent again (try {tries + 1})",
            RETRIED: f"sent again (try {tries + 1}): failed again"}.get(state, state)


def _tries(n: int) -> str:
    return "try" if n == 1 else "tries"


def _partition_text(partition: tuple[int, int] | None) -> str | None:
    return None if partition is None else f"{partition[0]}/{partition[1]}"


def _partition(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    index, count = text.split("/")
    return int(index), int(count)


def _first(text: str | None) -> Any:
    values = decode_cursor(text)
    return values[0] if values else None
