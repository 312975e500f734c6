"""Row errors: where each is kept (its position), the reasons engage-sync gives itself, and
their records (part of `StateStore`, a mixin using only `self.engine`).

A row error is keyed by (run, kind, position), so recording one twice (after a resume) is a
no-op. A run's counts (`run_counts`) come from its journal (synced, failed, in doubt) and the
rejected, unmapped and doubled rows recorded here. This module is the one owner of how a
position is written:
- a rejected row: its encoded cursor, `#n` for the n-th row of a tie (`cursor.ties`);
- an item of a request that failed, was in doubt or may be doubled: `req<n>:<k>`;
- a row of a request in flight when its run was killed: `crash:<encoded cursor>`;
- an error of an answer that names no item: `req<n>:unmapped:<k>`.
A row error also keeps the row's declared key columns' values as they are in the source
(`key_values`, JSON as cursors are encoded; a payload key column as its MD5), so the
write-back can join it to its source row: taken from the position when it is a cursor
(rejects, crashes), else handed in by whoever knows them (the send loop, the journal).

A row error is kept under the integration's own name, whichever run records it: a partition's
run (`<integration>#k/N`) says which partition, so listing an integration's errors lists every
partition's, each with its partition (`partition` of `errors`, `run_errors`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.config import partition_names
from engage_sync.cursor.progress import Cursor, encode_cursor
from engage_sync.state.records import RunCounts, now
from engage_sync.state.schema import journal, row_errors, runs, upsert

LEFT = "left"
"""The kind of a leaver the service acknowledged (`state.leave_checks.record_leavers`): an
outcome for the write-back, never an error (the error listings leave it out)."""
IN_FLIGHT_AT_CRASH = "the run stopped while the request was in flight"
"""The reason of a row whose request was in flight when its run was killed."""

AFTER_DOUBT = ("sent again after an answer the service may have processed without "
               "answering (5xx, timeout or dropped connection): this row may be doubled")
AFTER_KILL = ("sent again after the run stopped while the request was in flight: this row "
              "may be doubled")


def reject_position(cursor: Cursor, ordinal: int) -> str:
    """A rejected row's position: its encoded cursor, `#ordinal` for a tie after the first."""
    text = encode_cursor(cursor) or ""
    return f"{text}#{ordinal}" if ordinal else text


def request_position(req_no: int, k: int) -> str:
    """The position of item `k` of request `req_no` (failed, in-doubt and doubled rows)."""
    return f"req{req_no}:{k}"


def request_of(position: str) -> int | None:
    """The request number of a `request_position` (or an unmapped error's), else None."""
    head = position.split(":", 1)[0]
    return int(head[3:]) if head.startswith("req") and head[3:].isdigit() else None


def crash_position(cursor: Cursor) -> str:
    """The position of a row whose request was in flight at a crash, named on resume."""
    return f"crash:{encode_cursor(cursor)}"


def item_of(position: str) -> int | None:
    """The item index of a `request_position`, else None."""
    head, _, tail = position.partition(":")
    return int(tail) if head.startswith("req") and tail.isdigit() else None


_TIE = re.compile(r"#\d+$")


def cursor_key_values(position: str) -> str | None:
    """The key values (JSON) of a row error whose position is its cursor: a reject (`#n` of a
    tie dropped) or a row in flight at a crash; None for any other position."""
    text = _TIE.sub("", position.removeprefix("crash:"))
    if not text.startswith("["):
        return None
    try:
        values = json.loads(text)
    except ValueError:
        return None
    return json.dumps(values[1:]) if isinstance(values, list) else None


def unmapped_position(req_no: int, k: int) -> str:
    """The position of the k-th error of request `req_no`'s answer that names no item."""
    return f"req{req_no}:unmapped:{k}"


def own_name(name: str) -> str:
    """The integration of a run's name: a partition's `<integration>#k/N` without its suffix."""
    parsed = partition_names.parse(name)
    return name if parsed is None else name.removesuffix(partition_names.suffix(*parsed))


def partition_of(run_name: str | None) -> str | None:
    """`k/N` of a partition's run name, else None (a run that is not a partition)."""
    parsed = partition_names.parse(run_name) if run_name is not None else None
    return None if parsed is None else partition_names.label(*parsed)


def insert_errors(conn: Connection, run_id: str, integration: str, kind: str,
                  rows: list[tuple[str, str, str]],
                  key_values: Mapping[str, str | None] | None = None) -> None:
    """Record row errors of one kind as (position, row key, reason), with their key values
    (by position, else from a cursor position: `cursor_key_values`); a second time, a no-op.
    `integration` may be a partition's run name: the error is kept under the integration's."""
    integration = own_name(integration)
    at = now()
    known = key_values or {}
    values = [{"run_id": run_id, "position": pos, "row_key": key, "kind": kind,
               "integration": integration, "reason": reason[:1000], "recorded_at": at,
               "key_values": known.get(pos) or cursor_key_values(pos)}
              for pos, key, reason in rows]
    upsert(conn, row_errors, values)


def run_counts(conn: Connection, run_id: str) -> RunCounts:
    """A run's counts: synced, failed and in doubt from its journal, the others from here."""
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


class RowErrors:
    """The StateStore's methods for row errors and run counts."""

    engine: Engine

    def record_errors(self, run_id: str, integration: str, kind: str,
                      rows: Iterable[tuple[str, str, str]]) -> None:
        """Row errors of one kind as (position, row key, reason); recording one twice is a
        no-op."""
        with self.engine.begin() as conn:
            insert_errors(conn, run_id, integration, kind, list(rows))

    def record_rejects(self, run_id: str, integration: str,
                       rejects: Iterable[tuple[str, str, str]]) -> None:
        """Rejects as (position, row key, reason); position is the encoded row cursor."""
        with self.engine.begin() as conn:
            insert_errors(conn, run_id, integration, "rejected", list(rejects))

    def counts(self, run_id: str) -> RunCounts:
        with self.engine.connect() as conn:
            return run_counts(conn, run_id)

    def show_counts(self, run_id: str) -> None:
        """Write a running run's counts so far (`run_counts`: its journal's and row errors')
        on its row, so its record shows them mid-way; a row no longer `running` is left as
        its end wrote it."""
        with self.engine.begin() as conn:
            c = run_counts(conn, run_id)
            conn.execute(runs.update().where(
                runs.c.run_id == run_id, runs.c.job_status == "running").values(
                rows_synced=c.synced, rows_failed_with_errors=c.failed,
                rows_in_doubt=c.in_doubt, rows_rejected=c.rejected,
                errors_unmapped=c.unmapped, rows_possibly_duplicated=c.duplicated))

    def errors(self, integration: str, limit: int = 100, partition: str | None = None
               ) -> list[dict[str, Any]]:
        """The integration's row errors, newest first, its partitions' included, each with
        `partition` (`k/N`, or None outside a partitioned run); only partition `k/N`'s when
        `partition` is given."""
        with self.engine.connect() as conn:
            names = [integration, *conn.scalars(  # kept under a partition's name before
                sa.select(runs.c.integration).distinct().where(runs.c.integration.startswith(
                    partition_names.family_prefix(integration), autoescape=True)))]
            query = _with_run_name(sa.select(row_errors)).where(
                row_errors.c.integration.in_(names), row_errors.c.kind != LEFT)
            if partition is not None:
                query = query.where(runs.c.integration == partition_names.run_name(
                    integration, *_parsed(partition)))
            rows = conn.execute(
                query.order_by(row_errors.c.recorded_at.desc(), row_errors.c.row_key)
                .limit(limit)).mappings().all()
        return [_shown(r) for r in rows]

    def run_errors(self, run_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        """(kind, row key, reason) of one run's row errors, by kind and position; a
        partitioned run's are its partitions', each with its `partition` (`k/N`)."""
        with self.engine.connect() as conn:
            parts = list(conn.scalars(sa.select(runs.c.run_id).where(runs.c.scope == run_id)))
            query = sa.select(row_errors.c.kind, row_errors.c.row_key, row_errors.c.reason)
            if parts:
                query = _with_run_name(query)
            rows = conn.execute(
                query.where(row_errors.c.run_id.in_([run_id, *parts]), row_errors.c.kind != LEFT)
                .order_by(row_errors.c.kind, row_errors.c.position).limit(limit)
            ).mappings().all()
        return [_shown(r) for r in rows]

    def prune_errors(self, older_than: datetime) -> int:
        """Delete row errors recorded before `older_than`, except those of runs still running
        (their rejects are counted again when they finish)."""
        running = sa.select(runs.c.run_id).where(runs.c.job_status == "running")
        with self.engine.begin() as conn:
            return conn.execute(row_errors.delete().where(
                row_errors.c.recorded_at < older_than,
                row_errors.c.run_id.not_in(running))).rowcount


def _with_run_name(query: sa.Select[Any]) -> sa.Select[Any]:
    """The query with the name of each row error's run (`run_name`), for its partition."""
    return query.add_columns(runs.c.integration.label("run_name")).select_from(
        row_errors.outerjoin(runs, runs.c.run_id == row_errors.c.run_id))


def _shown(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A row error as listed: its run's name replaced by its partition (when it was read)."""
    shown = dict(row)
    if "run_name" in shown:
        shown["partition"] = partition_of(shown.pop("run_name"))
    return shown


def _parsed(partition: str) -> tuple[int, int]:
    """(index, count) of a partition's label `k/N`; ValueError for anything else."""
    parsed = partition_names.parse(f"#{partition}")
    if parsed is None:
        raise ValueError(f"not a partition (k/N): {partition!r}")
    return parsed
