"""Run rows and integration cursors: opening, owning (the lease columns), moving and closing
a run, and the cursor each integration resumes from.

Part of `StateStore` (a mixin using only `self.engine`); the functions taking a `Connection`
are the pieces the store's multi-table transactions are built from. Invariants:
- a write fenced on an owner (`update_run`) is rolled back unless that owner still holds the run;
- a run's progress and its integration's cursor move together (`move_progress`), to where the
  store's caller says the settled prefix ends (never back: the caller's rule, `cursor.progress`);
- a run's row counts are written when it closes (`close_run`), from the journal and row errors.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.config import partition_names
from engage_sync.cursor.progress import decode_cursor, encode_cursor
from engage_sync.errors import LeaseLost
from engage_sync.state.owners import owner_token
from engage_sync.state.records import RunCounts, now
from engage_sync.state.schema import cursors, runs


def update_run(conn: Connection, run_id: str, owner: str | None = None,
               values: Mapping[str, Any] | None = None, added: Mapping[str, int] | None = None,
               ) -> None:
    """One UPDATE of a run's row: set `values`, add `added` to counting columns, and, if
    `owner` is given, fence the transaction on it: raise LeaseLost (rolling the write back)
    unless `owner` still owns the run. Its row lock orders it with a take-over. The statement
    of each shape is built once (a run makes one of these for each request or group)."""
    values, added = values or {}, added or {}
    if owner is None and not values and not added:
        return
    statement = _run_update(owner is not None, tuple(values), tuple(added))
    params = {"b_run": run_id, "b_owner": owner,
              **{f"b_{k}": v for k, v in values.items()},
              **{f"b_{k}": n for k, n in added.items()}}
    held = conn.execute(statement, params).rowcount
    if owner is not None and held != 1:
        raise LeaseLost(f"run {run_id}: another process owns the run now; nothing written")


@functools.cache
def _run_update(fenced: bool, setting: tuple[str, ...], adding: tuple[str, ...]) -> sa.Update:
    where = [runs.c.run_id == sa.bindparam("b_run")]
    if fenced:
        where.append(runs.c.owner == sa.bindparam("b_owner"))
    columns: dict[str, Any] = {c: sa.bindparam(f"b_{c}") for c in setting}
    columns |= {c: runs.c[c] + sa.bindparam(f"b_{c}") for c in adding}
    return runs.update().where(*where).values(columns or {"owner": sa.bindparam("b_owner")})


_CURSOR_UPDATE = cursors.update().where(cursors.c.integration == sa.bindparam("b_integration"))
_CURSOR_INSERT = cursors.insert()


def set_cursor(conn: Connection, integration: str, cursor: Sequence[Any]) -> None:
    values = {"cursor": encode_cursor(cursor), "updated_at": now()}
    done = conn.execute(_CURSOR_UPDATE, {"b_integration": integration, **values})
    if done.rowcount == 0:
        conn.execute(_CURSOR_INSERT, {"integration": integration, **values})


def progress_values(progress: Sequence[Any]) -> dict[str, Any]:
    """The run row's columns that say how far it got, for `update_run`."""
    return {"progress": encode_cursor(progress), "last_timestamp_synced": _iso(progress[0])}


def move_progress(conn: Connection, run_id: str, integration: str,
                  progress: Sequence[Any], move_cursor: bool) -> None:
    """Set the run's progress and, if `move_cursor`, the integration's cursor to `progress`."""
    update_run(conn, run_id, values=progress_values(progress))
    if move_cursor:
        set_cursor(conn, integration, progress)


def close_run(conn: Connection, run_id: str, job_status: str, message: str | None,
              counts: RunCounts, **more: int) -> None:
    """Finish a run's row: its status, finish time, message and counts (and `more` columns)."""
    conn.execute(runs.update().where(runs.c.run_id == run_id).values(
        job_status=job_status, sync_finish_time=now(), message=message,
        rows_synced=counts.synced, rows_failed_with_errors=counts.failed,
        rows_in_doubt=counts.in_doubt, rows_rejected=counts.rejected,
        errors_unmapped=counts.unmapped, rows_possibly_duplicated=counts.duplicated, **more,
    ))


class RunRows:
    """The StateStore's methods for run rows, their leases and the integrations' cursors."""

    engine: Engine

    def cursor(self, integration: str) -> tuple[Any, ...] | None:
        with self.engine.connect() as conn:
            text = conn.scalar(
                sa.select(cursors.c.cursor).where(cursors.c.integration == integration)
            )
        return decode_cursor(text)

    def advance(self, run_id: str, integration: str, progress: Sequence[Any],
                move_cursor: bool = True) -> None:
        with self.engine.begin() as conn:
            move_progress(conn, run_id, integration, progress, move_cursor)

    def unfinished_run(self, integration: str, mode: str,
                       scope: str | None = None) -> dict[str, Any] | None:
        """The newest run of this integration, mode and scope (a backfill's range) still
        `running` (to resume), if any."""
        same_scope = runs.c.scope.is_(None) if scope is None else runs.c.scope == scope
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(runs)
                .where(runs.c.integration == integration, runs.c.job_status == "running",
                       runs.c.mode == mode, same_scope)
                .order_by(runs.c.seq.desc())
                .limit(1)
            ).mappings().first()
        return dict(row) if row else None

    def open_run(
        self,
        integration: str,
        mode: str,
        window_start: Sequence[Any] | None,
        signpost: datetime | None,
        floor: datetime | None = None,
        job_status: str = "running",
        message: str | None = None,
        scope: str | None = None,
        owner: str | None = None,
        lease_seconds: float | None = None,
    ) -> str:
        """A new run, owned by `owner` (default: this process) with a lease of
        `lease_seconds` if given."""
        run_id = str(uuid4())
        lease_until = now() + timedelta(seconds=lease_seconds) if lease_seconds else None
        with self.engine.begin() as conn:
            seq = (conn.scalar(
                sa.select(sa.func.max(runs.c.seq)).where(runs.c.integration == integration)
            ) or 0) + 1
            conn.execute(runs.insert().values(
                run_id=run_id, integration=integration, seq=seq, mode=mode, scope=scope,
                job_status=job_status, sync_start_time=now(),
                window_start=encode_cursor(window_start),
                signpost=encode_cursor([signpost]) if signpost else None,
                floor=encode_cursor([floor]) if floor else None,
                progress=encode_cursor(window_start), message=message,
                owner=owner or owner_token(), lease_until=lease_until,
                last_timestamp_synced=_iso(window_start[0]) if window_start else None,
                rows_synced=0, rows_failed_with_errors=0, rows_rejected=0, rows_in_doubt=0,
                requests_sent=0,
            ))
        return run_id

    def take_over(self, run_id: str, owner: str, previous: str | None,
                  lease_seconds: float, expired_only: bool = True) -> bool:
        """Take an unfinished run over from `previous` if its lease expired (or it never had
        one; any lease if not `expired_only`, for an owner known dead): a compare-and-set, so
        of two processes racing for it one wins. Returns whether this one did."""
        at = now()
        same = runs.c.owner.is_(None) if previous is None else runs.c.owner == previous
        expired = sa.or_(runs.c.lease_until.is_(None), runs.c.lease_until < at)
        with self.engine.begin() as conn:
            return conn.execute(runs.update().where(
                runs.c.run_id == run_id, same, expired if expired_only else sa.true(),
            ).values(owner=owner, lease_until=at + timedelta(seconds=lease_seconds))
            ).rowcount == 1

    def renew_lease(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Extend the lease of a run `owner` still owns; False when it owns it no more."""
        with self.engine.begin() as conn:
            return conn.execute(runs.update().where(
                runs.c.run_id == run_id, runs.c.owner == owner,
                runs.c.job_status == "running",
            ).values(lease_until=now() + timedelta(seconds=lease_seconds))).rowcount == 1

    def release_lease(self, run_id: str, owner: str, message: str | None = None) -> None:
        """Give up a run's lease without finishing it (it stopped on an error and is to be
        resumed): the next start takes it over at once. Says why in its message."""
        values: dict[str, Any] = {"lease_until": now()}
        if message is not None:
            values["message"] = message
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id, runs.c.owner == owner)
                         .values(**values))

    def run(self, run_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs).where(runs.c.run_id == run_id)).mappings().one()
        return dict(row)

    def has_run(self, run_id: str) -> bool:
        with self.engine.connect() as conn:
            return conn.scalar(sa.select(runs.c.run_id).where(runs.c.run_id == run_id)) \
                is not None

    def set_run_count(self, run_id: str, column: str, value: int) -> None:
        """Set one of a run's own counts that the journal does not hold (e.g.
        `rows_skipped_null_cursor`)."""
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id).values({column: value}))

    def add_saved_counts(self, run_id: str, unchanged: int, saved: int) -> None:
        """Add rows a stage left unsent and the data points it saved (the field diff) to the
        run's record."""
        if not unchanged and not saved:
            return
        with self.engine.begin() as conn:
            update_run(conn, run_id, added={"rows_unchanged": unchanged,
                                            "data_points_saved": saved})

    def set_message(self, run_id: str, message: str) -> None:
        """Say why on a finished run's record (an alert), leaving its times and counts."""
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id).values(message=message))

    def runs_newest_first(self, integration: str, offset: int, limit: int) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(runs).where(runs.c.integration == integration)
                .order_by(runs.c.seq.desc()).offset(offset).limit(limit)
            ).mappings().all()
        return [dict(r) for r in rows]

    def count_runs(self, integration: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.scalar(sa.select(sa.func.count()).select_from(runs)
                                   .where(runs.c.integration == integration)) or 0)

    def run_totals(self) -> list[dict[str, Any]]:
        """Per (integration, job_status): the number of runs, the sums of their counts and
        the latest finish (UTC). Partitions' own run rows are left out: their parent's
        record holds their sums."""
        sums = [sa.func.coalesce(sa.func.sum(runs.c[c]), 0).label(c) for c in _TOTALLED]
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(
                runs.c.integration, runs.c.job_status, sa.func.count().label("runs"), *sums,
                sa.func.max(runs.c.sync_finish_time).label("last_finish"),
            ).group_by(runs.c.integration, runs.c.job_status)).mappings().all()
        return [{**r, "last_finish": _utc(r["last_finish"])} for r in rows
                if partition_names.parse(r["integration"]) is None]

    def has_live_run(self, integration: str) -> bool:
        """True while a run of the integration is `running` under a lease that has not
        expired: a process is at it. A crashed run's lease runs out; the next start resumes it."""
        with self.engine.connect() as conn:
            found = conn.scalar(sa.select(runs.c.run_id).where(
                runs.c.integration == integration, runs.c.job_status == "running",
                runs.c.lease_until > now()).limit(1))
        return found is not None

    def run_seqs(self, integration: str, *, at_most: int | None = None,
                 above: int | None = None, limit: int) -> list[int]:
        """Run seqs of an integration: newest first at or below `at_most`, or oldest first
        above `above` (the status pages)."""
        query = sa.select(runs.c.seq).where(runs.c.integration == integration)
        if above is not None:
            query = query.where(runs.c.seq > above).order_by(runs.c.seq.asc())
        else:
            if at_most is not None:
                query = query.where(runs.c.seq <= at_most)
            query = query.order_by(runs.c.seq.desc())
        with self.engine.connect() as conn:
            return [int(s) for s in conn.scalars(query.limit(limit))]

    def runs_by_seq(self, integration: str, seqs: Sequence[int]) -> list[dict[str, Any]]:
        """The run rows of these seqs, newest first."""
        if not seqs:
            return []
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(runs).where(runs.c.integration == integration,
                                      runs.c.seq.in_(list(seqs)))
                .order_by(runs.c.seq.desc())
            ).mappings().all()
        return [dict(r) for r in rows]


def _iso(value: Any) -> str:
    """A cursor's first value as the run row's `last_timestamp_synced` (UTC, `Z`)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(value)


_TOTALLED = ("rows_synced", "rows_failed_with_errors", "rows_rejected", "rows_in_doubt",
             "rows_unchanged", "data_points_sent", "data_points_saved", "requests_sent",
             "rows_left")


def _utc(value: datetime | None) -> datetime | None:
    """A stored time as aware UTC (SQLite returns them naive)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
