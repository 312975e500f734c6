"""Durable state: cursors, runs, the request journal and row errors, in a SQL database.

SQLite file by default, PostgreSQL by URL for teams. Invariants:
- a journal entry is written (state `pending`) before its request leaves, and settled
  (`acked`, `failed` or `in_doubt`) in the same transaction that records its row errors and
  moves the cursor;
- entries of one run cover contiguous ranges of the source order: entry n covers rows with
  cursor in (end of entry n-1, end of entry n]; the run's progress (and the integration's
  cursor) only ever moves to the end of the longest prefix of settled entries, so it never
  passes a row that is not delivered, rejected, failed or in doubt, and never moves back;
- row errors are keyed by (run, kind, position): the row's cursor for rejects, the request and
  item index for failed and in-doubt rows; recording one twice (after a resume) is a no-op.
- run totals come from the journal (synced, failed, in doubt) and the rejects recorded.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.cursor.progress import decode_cursor, encode_cursor
from engage_sync.errors import LeaseLost
from engage_sync.state import fields as field_record
from engage_sync.state.partitions import PartitionRuns, own_runs
from engage_sync.state.row_errors import AFTER_KILL, IN_FLIGHT_AT_CRASH, request_position
from engage_sync.state.schema import (
    SETTLED,
    acks,
    add_missing_columns,
    cursors,
    journal,
    metadata,
    row_errors,
    runs,
    sqlite_pragmas,
    upsert,
)


@dataclass(frozen=True, slots=True)
class RunCounts:
    synced: int = 0
    failed: int = 0
    in_doubt: int = 0
    rejected: int = 0
    unmapped: int = 0
    """Service errors that named no item of their request (not rows: not in the row counts)."""
    duplicated: int = 0
    """Rows that may have reached the service twice (also counted by how they ended)."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A request's place in the source order: rows with start < cursor <= end."""

    req_no: int
    start: tuple[Any, ...] | None
    end: tuple[Any, ...]
    items: int
    state: str = "pending"
    keys: tuple[str, ...] | None = None
    """The row keys of its items (exact journals), to name them if it is left in flight."""


@dataclass(frozen=True, slots=True)
class Settlement:
    """How a journaled request ended: rows synced, failed and in doubt (position, key, reason)."""

    req_no: int
    state: str
    synced: int
    failed: Sequence[tuple[str, str, str]] = ()
    in_doubt: Sequence[tuple[str, str, str]] = ()
    reason: str | None = None
    unmapped: Sequence[tuple[str, str, str]] = ()
    """Errors of the answer that name no item: (position, "request N", reason)."""
    duplicated: Sequence[tuple[str, str, str]] = ()
    """Rows sent again after a doubtful attempt, that may be doubled (`resends`)."""


def _now() -> datetime:
    return datetime.now(UTC)


def owner_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_OWNER = re.compile(r"^(?P<host>[^:]*):(?P<pid>\d+)(?::[0-9a-f]+)?$")


def _local_pid(owner: str | None) -> int | None:
    """The pid of an owner token ("host:pid" or "host:pid:attempt") of this host, else None."""
    match = _OWNER.match(owner or "")
    if match is None or match["host"] != socket.gethostname():
        return None
    return int(match["pid"])


def owner_alive(owner: str | None) -> bool:
    """Whether the process that owns a run is alive on this host (another process than this).
    Owners on other hosts cannot be checked from here and count as gone (runs from before
    leases only: `lease.py` decides for the others)."""
    pid = _local_pid(owner)
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_gone_here(owner: str | None) -> bool:
    """Whether the owner is surely not running: a process of this host that is dead, or an
    earlier attempt of this very process. A lease need not run out for such an owner."""
    return _local_pid(owner) is not None and not owner_alive(owner)


class StateStore(PartitionRuns):
    """All reads and writes of engage-sync's own state. Thread-safe through the engine's pool.
    Partitioned runs' methods are in `state_partitions`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        metadata.create_all(engine)
        add_missing_columns(engine)

    @classmethod
    def from_url(cls, url: str) -> StateStore:
        engine = sa.create_engine(url)
        if engine.dialect.name == "sqlite":
            sa.event.listen(engine, "connect", sqlite_pragmas)
        return cls(engine)

    # cursors -------------------------------------------------------------------------------
    def cursor(self, integration: str) -> tuple[Any, ...] | None:
        with self.engine.connect() as conn:
            text = conn.scalar(
                sa.select(cursors.c.cursor).where(cursors.c.integration == integration)
            )
        return decode_cursor(text)

    def _set_cursor(self, conn: Connection, integration: str, cursor: Sequence[Any]) -> None:
        values = {"cursor": encode_cursor(cursor), "updated_at": _now()}
        done = conn.execute(
            cursors.update().where(cursors.c.integration == integration).values(**values)
        )
        if done.rowcount == 0:
            conn.execute(cursors.insert().values(integration=integration, **values))

    # runs ----------------------------------------------------------------------------------
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
        run_id = str(uuid.uuid4())
        lease_until = _now() + timedelta(seconds=lease_seconds) if lease_seconds else None
        with self.engine.begin() as conn:
            seq = (conn.scalar(
                sa.select(sa.func.max(runs.c.seq)).where(runs.c.integration == integration)
            ) or 0) + 1
            conn.execute(runs.insert().values(
                run_id=run_id, integration=integration, seq=seq, mode=mode, scope=scope,
                job_status=job_status, sync_start_time=_now(),
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
        now = _now()
        same = runs.c.owner.is_(None) if previous is None else runs.c.owner == previous
        expired = sa.or_(runs.c.lease_until.is_(None), runs.c.lease_until < now)
        with self.engine.begin() as conn:
            return conn.execute(runs.update().where(
                runs.c.run_id == run_id, same, expired if expired_only else sa.true(),
            ).values(owner=owner, lease_until=now + timedelta(seconds=lease_seconds))
            ).rowcount == 1

    def renew_lease(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Extend the lease of a run `owner` still owns; False when it owns it no more."""
        with self.engine.begin() as conn:
            return conn.execute(runs.update().where(
                runs.c.run_id == run_id, runs.c.owner == owner,
                runs.c.job_status == "running",
            ).values(lease_until=_now() + timedelta(seconds=lease_seconds))).rowcount == 1

    @staticmethod
    def _fence(conn: Connection, run_id: str, owner: str | None) -> None:
        """Within a write's transaction: raise LeaseLost (rolling the write back) unless
        `owner` still owns the run. The row lock it takes orders it with a take-over."""
        if owner is None:
            return
        held = conn.execute(runs.update().where(runs.c.run_id == run_id, runs.c.owner == owner)
                            .values(owner=owner)).rowcount
        if held != 1:
            raise LeaseLost(f"run {run_id}: another process owns the run now; nothing written")

    def run(self, run_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(runs).where(runs.c.run_id == run_id)).mappings().one()
        return dict(row)

    def finish_run(self, run_id: str, job_status: str, message: str | None = None) -> None:
        counts = self.counts(run_id)
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id).values(
                job_status=job_status, sync_finish_time=_now(), message=message,
                rows_synced=counts.synced, rows_failed_with_errors=counts.failed,
                rows_in_doubt=counts.in_doubt, rows_rejected=counts.rejected,
                errors_unmapped=counts.unmapped, rows_possibly_duplicated=counts.duplicated,
            ))
        self.compact_journal(run_id)

    # journal -------------------------------------------------------------------------------
    def compact_journal(self, run_id: str) -> int:
        """Merge a finished run's acknowledged, error-free requests that follow each other in
        the source order into one entry: the ranges (which backfills consult) and the counts
        stay the same, and the journal grows by a few rows per run, not one per request.
        Returns the number of entries removed."""
        with self.engine.begin() as conn:
            rows = conn.execute(sa.select(
                journal.c.req_no, journal.c.start_cursor, journal.c.end_cursor,
                journal.c.state, journal.c.failed, journal.c.in_doubt,
                journal.c.item_count, journal.c.synced, journal.c.item_keys,
            ).where(journal.c.run_id == run_id)).all()
            ordered = sorted(rows, key=lambda r: decode_cursor(r.end_cursor) or ())
            groups: list[list[Any]] = []
            for r in ordered:
                clean = r.state == "acked" and not r.failed and not r.in_doubt
                prev = groups[-1][-1] if groups else None
                if (clean and prev is not None and prev.state == "acked" and not prev.failed
                        and not prev.in_doubt and r.start_cursor == prev.end_cursor):
                    groups[-1].append(r)
                else:
                    groups.append([r])
            removed: list[int] = []
            for group in (g for g in groups if len(g) > 1):
                conn.execute(journal.update().where(
                    journal.c.run_id == run_id, journal.c.req_no == group[0].req_no,
                ).values(end_cursor=group[-1].end_cursor,
                         item_count=sum(r.item_count for r in group),
                         synced=sum(r.synced for r in group),
                         item_keys=_merged_keys(r.item_keys for r in group)))
                removed += [r.req_no for r in group[1:]]
            for i in range(0, len(removed), 500):
                conn.execute(journal.delete().where(
                    journal.c.run_id == run_id, journal.c.req_no.in_(removed[i:i + 500])))
        return len(removed)

    def journal_pending(self, run_id: str, entries: Sequence[JournalEntry],
                        owner: str | None = None) -> None:
        """Record requests before they are sent (rule 4), in one transaction, fenced on
        `owner` if given."""
        if not entries:
            return
        with self.engine.begin() as conn:
            self._fence(conn, run_id, owner)
            conn.execute(journal.insert(), [
                {"run_id": run_id, "req_no": e.req_no, "start_cursor": encode_cursor(e.start),
                 "end_cursor": encode_cursor(e.end), "state": "pending", "item_count": e.items,
                 "synced": 0, "failed": 0, "in_doubt": 0,
                 "item_keys": None if e.keys is None else json.dumps(e.keys)}
                for e in entries
            ])
            conn.execute(runs.update().where(runs.c.run_id == run_id)
                         .values(requests_sent=runs.c.requests_sent + len(entries)))

    def settle(
        self,
        run_id: str,
        integration: str,
        settlements: Sequence[Settlement],
        progress: Sequence[Any] | None = None,
        move_cursor: bool = True,
        acked_rows: Sequence[tuple[str, str, str]] = (),
        acked_fields: Sequence[tuple[str, bytes]] = (),
        points: int = 0,
        owner: str | None = None,
    ) -> None:
        """Settle journal entries, record their failed / in-doubt rows, the field digests and
        data points of the objects the service acknowledged (`acked_fields`: (user, encoded
        delta), `points`) and, if given, move the run's progress and the integration cursor,
        all in one transaction, fenced on `owner` if given."""
        with self.engine.begin() as conn:
            self._fence(conn, run_id, owner)
            field_record.log(conn, integration, acked_fields)
            if points:
                conn.execute(runs.update().where(runs.c.run_id == run_id).values(
                    data_points_sent=runs.c.data_points_sent + points))
            if settlements:
                assert all(s.state in SETTLED for s in settlements)
                conn.execute(
                    journal.update()
                    .where(journal.c.run_id == run_id, journal.c.req_no == sa.bindparam("b_req"))
                    .values(state=sa.bindparam("b_state"), synced=sa.bindparam("b_synced"),
                            failed=sa.bindparam("b_failed"), in_doubt=sa.bindparam("b_doubt"),
                            reason=sa.bindparam("b_reason")),
                    [{"b_req": s.req_no, "b_state": s.state, "b_synced": s.synced,
                      "b_failed": len(s.failed), "b_doubt": len(s.in_doubt),
                      "b_reason": s.reason} for s in settlements])
            failed = [row for s in settlements for row in s.failed]
            in_doubt = [row for s in settlements for row in s.in_doubt]
            self._insert_errors(conn, run_id, integration, "failed", failed)
            self._insert_errors(conn, run_id, integration, "in_doubt", in_doubt)
            self._insert_errors(conn, run_id, integration, "unmapped",
                                [row for s in settlements for row in s.unmapped])
            self._insert_errors(conn, run_id, integration, "duplicate",
                                [row for s in settlements for row in s.duplicated])
            self._insert_acks(conn, integration, acked_rows)
            if progress is not None:
                self._advance(conn, run_id, integration, progress, move_cursor)

    # the field record --------------------------------------------------------------------
    def field_digests(self, integration: str, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """user key → the digests the service acknowledged (`field_diff.decode`)."""
        with self.engine.connect() as conn:
            return field_record.lookup(conn, integration, keys)

    def fold_fields(self, integration: str) -> int:
        """Move the integration's logged field digests into its record (`field_record.fold`);
        returns how many deltas were folded."""
        with self.engine.begin() as conn:
            return field_record.fold(conn, integration)

    def store_field_file(self, integration: str, path: str, table: str) -> int:
        """Write the whole records a helper kept in the SQLite file `path` (`table`: user_key
        primary key, digests) over the integration's record, in one transaction (on SQLite,
        one statement: the file is attached); returns how many."""
        if self.engine.dialect.name == "sqlite":
            with self.engine.connect() as conn:  # ATTACH and DETACH: outside a transaction
                conn.exec_driver_sql("ATTACH DATABASE ? AS helper", (path,))
                conn.commit()
                try:
                    written = field_record.store_attached(conn, integration, "helper", table)
                    conn.commit()
                finally:
                    conn.rollback()
                    conn.exec_driver_sql("DETACH DATABASE helper")
                    conn.commit()
                return written
        source = sqlite3.connect(path)
        try:
            with self.engine.begin() as conn:
                return field_record.store(conn, integration, source.execute(
                    f"SELECT user_key, digests FROM {table} ORDER BY user_key"))
        finally:
            source.close()

    def has_field_record(self, integration: str) -> bool:
        """Whether the integration's folded field record holds any user."""
        with self.engine.connect() as conn:
            return field_record.any_recorded(conn, integration)

    def forget_fields(self, integration: str) -> int:
        """Forget what the service acknowledged for this integration: its next run sends
        every attribute. Returns the number of users forgotten."""
        with self.engine.begin() as conn:
            return field_record.forget(conn, integration)

    def add_diff_counts(self, run_id: str, unchanged: int, saved: int) -> None:
        """Add rows the diff left unsent and the data points it saved to the run's record."""
        if not unchanged and not saved:
            return
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id).values(
                rows_unchanged=runs.c.rows_unchanged + unchanged,
                data_points_saved=runs.c.data_points_saved + saved))

    # lookback acks ---------------------------------------------------------------------------
    def _insert_acks(self, conn: Connection, integration: str,
                     rows: Sequence[tuple[str, str, str]]) -> None:
        values = [{"integration": integration, "row_key": k, "stamp": s, "digest": d}
                  for k, s, d in rows]
        upsert(conn, acks, values, update=("digest",))

    def record_acks(self, integration: str, rows: Sequence[tuple[str, str, str]]) -> None:
        with self.engine.begin() as conn:
            self._insert_acks(conn, integration, rows)

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

    def advance(self, run_id: str, integration: str, progress: Sequence[Any],
                move_cursor: bool = True) -> None:
        with self.engine.begin() as conn:
            self._advance(conn, run_id, integration, progress, move_cursor)

    def _advance(self, conn: Connection, run_id: str, integration: str,
                 progress: Sequence[Any], move_cursor: bool) -> None:
        conn.execute(runs.update().where(runs.c.run_id == run_id).values(
            progress=encode_cursor(progress), last_timestamp_synced=_iso(progress[0]),
        ))
        if move_cursor:
            self._set_cursor(conn, integration, progress)

    def journal_entries(self, run_id: str) -> list[JournalEntry]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(journal.c.req_no, journal.c.start_cursor, journal.c.end_cursor,
                          journal.c.state, journal.c.item_count)
                .where(journal.c.run_id == run_id).order_by(journal.c.req_no)
            ).all()
        return [JournalEntry(r.req_no, decode_cursor(r.start_cursor),
                             decode_cursor(r.end_cursor) or (), r.item_count, r.state)
                for r in rows]

    def settled_ranges(self, integration: str, modes: Sequence[str]
                       ) -> list[tuple[tuple[Any, ...] | None, tuple[Any, ...], Any]]:
        """(start, end] cursor ranges of requests that runs of these modes (or their
        partitions) sent and the service acknowledged or may have processed (in doubt), in
        journal order, each with the row keys of its items (None when the journal did not keep
        them). Partitions' ranges overlap each other; their keys do not."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(journal.c.start_cursor, journal.c.end_cursor, journal.c.item_keys)
                .join(runs, runs.c.run_id == journal.c.run_id)
                .where(own_runs(integration), runs.c.mode.in_(list(modes)),
                       journal.c.state.in_(["acked", "in_doubt", "pending"]))
            ).all()
        return [(decode_cursor(r[0]), decode_cursor(r[1]) or (),
                 None if r[2] is None else json.loads(r[2])) for r in rows]

    def drop_pending(self, run_id: str, integration: str, name_duplicates: bool = False) -> int:
        """Forget entries left pending by a crash whose rows will be sent again; with
        `name_duplicates` (a kind that is not idempotent), name their rows as possibly doubled
        (from the keys the journal kept) in the same transaction."""
        with self.engine.begin() as conn:
            pending = conn.execute(sa.select(journal.c.req_no, journal.c.item_keys).where(
                journal.c.run_id == run_id, journal.c.state == "pending")).all()
            if name_duplicates:
                self._insert_errors(conn, run_id, integration, "duplicate",
                                    _keyed(pending, AFTER_KILL))
            return conn.execute(journal.delete().where(
                journal.c.run_id == run_id, journal.c.state == "pending")).rowcount

    def mark_pending_in_doubt(self, run_id: str, integration: str) -> set[int]:
        """Entries left pending by a crash, not to be sent again: their rows are in doubt, and
        named (from the keys the journal kept) in the same transaction, so no later kill can
        lose their names. Returns the entries whose keys were not kept (journaled by an
        older version, or grouped): their rows are named when read again."""
        reason = IN_FLIGHT_AT_CRASH
        with self.engine.begin() as conn:
            pending = conn.execute(sa.select(journal.c.req_no, journal.c.item_keys).where(
                journal.c.run_id == run_id, journal.c.state == "pending")).all()
            conn.execute(journal.update().where(
                journal.c.run_id == run_id, journal.c.state == "pending",
            ).values(state="in_doubt", in_doubt=journal.c.item_count, reason=reason))
            self._insert_errors(conn, run_id, integration, "in_doubt", _keyed(pending, reason))
        return {r.req_no for r in pending if r.item_keys is None}

    # row errors ----------------------------------------------------------------------------
    def record_errors(self, run_id: str, integration: str, kind: str,
                      rows: Iterable[tuple[str, str, str]]) -> None:
        """Row errors of one kind as (position, row key, reason); recording one twice is a
        no-op."""
        with self.engine.begin() as conn:
            self._insert_errors(conn, run_id, integration, kind, list(rows))

    def record_rejects(self, run_id: str, integration: str,
                       rejects: Iterable[tuple[str, str, str]]) -> None:
        """Rejects as (position, row key, reason); position is the encoded row cursor."""
        with self.engine.begin() as conn:
            self._insert_errors(conn, run_id, integration, "rejected", list(rejects))

    def _insert_errors(self, conn: Connection, run_id: str, integration: str, kind: str,
                       rows: list[tuple[str, str, str]]) -> None:
        now = _now()
        values = [{"run_id": run_id, "position": pos, "row_key": key, "kind": kind,
                   "integration": integration, "reason": reason[:1000], "recorded_at": now}
                  for pos, key, reason in rows]
        upsert(conn, row_errors, values)

    def counts(self, run_id: str) -> RunCounts:
        with self.engine.connect() as conn:
            j = conn.execute(sa.select(
                sa.func.coalesce(sa.func.sum(journal.c.synced), 0),
                sa.func.coalesce(sa.func.sum(journal.c.failed), 0),
                sa.func.coalesce(sa.func.sum(journal.c.in_doubt), 0),
            ).where(journal.c.run_id == run_id)).one()
            kinds = {str(kind): int(n) for kind, n in conn.execute(
                sa.select(row_errors.c.kind, sa.func.count()).where(
                    row_errors.c.run_id == run_id,
                    row_errors.c.kind.in_(["rejected", "unmapped", "duplicate"]))
                .group_by(row_errors.c.kind))}
        return RunCounts(synced=int(j[0]), failed=int(j[1]), in_doubt=int(j[2]),
                         rejected=int(kinds.get("rejected", 0)),
                         unmapped=int(kinds.get("unmapped", 0)),
                         duplicated=int(kinds.get("duplicate", 0)))

    def errors(self, integration: str, limit: int = 100) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(row_errors).where(row_errors.c.integration == integration)
                .order_by(row_errors.c.recorded_at.desc(), row_errors.c.row_key).limit(limit)
            ).mappings().all()
        return [dict(r) for r in rows]

    def prune_errors(self, older_than: datetime) -> int:
        """Delete row errors recorded before `older_than`, except those of runs still running
        (their rejects are counted again when they finish)."""
        running = sa.select(runs.c.run_id).where(runs.c.job_status == "running")
        with self.engine.begin() as conn:
            return conn.execute(row_errors.delete().where(
                row_errors.c.recorded_at < older_than,
                row_errors.c.run_id.not_in(running))).rowcount

    def set_run_count(self, run_id: str, column: str, value: int) -> None:
        """Set one of a run's own counts that the journal does not hold (e.g.
        `rows_skipped_null_cursor`)."""
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id).values({column: value}))

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


def _merged_keys(keys: Iterable[str | None]) -> str | None:
    """The item keys of merged journal entries: all of them, or None if one lacks them."""
    merged: list[str] = []
    for text in keys:
        if text is None:
            return None
        merged.extend(json.loads(text))
    return json.dumps(merged)


def _keyed(entries: Sequence[Any], reason: str) -> list[tuple[str, str, str]]:
    """Row errors naming the items of journal entries (req_no, item_keys) that kept keys."""
    return [(request_position(r.req_no, k), key, reason) for r in entries
            if r.item_keys is not None for k, key in enumerate(json.loads(r.item_keys))]


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(value)
