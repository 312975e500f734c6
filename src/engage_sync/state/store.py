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

`StateStore` is composed by what each part keeps: run rows and cursors (`runs`), the journal
(`journal`), row errors and counts (`row_errors`), lookback acks (`acks`), the field record
(`fields`), partitioned runs (`partitions`, whose rows are run rows), failed requests kept for
later runs (`retries`), the schema guard's record (`source_schemas`) and which runs were
written back to the user's warehouse (`writebacks`). Each part's methods
write one table; the transactions that write several are here, built from the parts'
functions taking a `Connection`, so no part calls another's methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.state import fields as field_record
from engage_sync.state import journal
from engage_sync.state.acks import Acks, insert_acks
from engage_sync.state.alert_states import AlertStates
from engage_sync.state.fields import FieldRecord
from engage_sync.state.journal import Journal
from engage_sync.state.migrations import ensure_schema
from engage_sync.state.outage import watch
from engage_sync.state.partitions import PartitionRuns
from engage_sync.state.records import JournalEntry, RunCounts, Settlement
from engage_sync.state.retries import Retries
from engage_sync.state.row_errors import (
    AFTER_KILL,
    IN_FLIGHT_AT_CRASH,
    RowErrors,
    insert_errors,
)
from engage_sync.state.runs import RunRows, close_run, progress_values, set_cursor, update_run
from engage_sync.state.schema import sqlite_pragmas
from engage_sync.state.source_schemas import SourceSchemas
from engage_sync.state.spend import Spend
from engage_sync.state.traces import Traces
from engage_sync.state.writebacks import Writebacks


class StateStore(RunRows, Journal, RowErrors, Acks, FieldRecord, PartitionRuns, SourceSchemas,
                 Retries, Writebacks, Spend, Traces, AlertStates):
    """All reads and writes of engage-sync's own state. Thread-safe through the engine's pool."""

    def __init__(self, engine: Engine) -> None:
        """Opens the store on `engine`, creating or upgrading its schema in place
        (`migrations.ensure_schema`: safe with other processes doing the same). An outage of
        the database raises StateUnavailable from every method (`outage`)."""
        self.engine = engine
        watch(engine)
        ensure_schema(engine)

    @classmethod
    def from_url(cls, url: str, **engine_args: Any) -> StateStore:
        """The store at `url`; `engine_args` size its pool (`adapters/folder_runs.py`)."""
        engine = sa.create_engine(url, **engine_args)
        if engine.dialect.name == "sqlite":
            sa.event.listen(engine, "connect", sqlite_pragmas)
        return cls(engine)

    def journal_pending(self, run_id: str, entries: Sequence[JournalEntry],
                        owner: str | None = None) -> None:
        """Record requests before they are sent (rule 4), in one transaction, fenced on
        `owner` if given."""
        if not entries:
            return
        with self.engine.begin() as conn:
            update_run(conn, run_id, owner, added={"requests_sent": len(entries)})
            journal.insert_pending(conn, run_id, entries)

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
        pending: Sequence[JournalEntry] = (),
    ) -> None:
        """Settle journal entries, record their failed / in-doubt rows, the field digests and
        data points of the objects the service acknowledged (`acked_fields`: (user, encoded
        delta), `points`) and, if given, move the run's progress and the integration cursor,
        all in one transaction, fenced on `owner` if given; and journal `pending`, the
        requests about to be sent, in the same transaction (as `journal_pending`)."""
        added = {"data_points_sent": points} if points else {}
        if pending:
            added["requests_sent"] = len(pending)
        with self.engine.begin() as conn:
            update_run(conn, run_id, owner,
                       values=progress_values(progress) if progress is not None else None,
                       added=added)
            journal.insert_pending(conn, run_id, pending)
            field_record.log(conn, integration, acked_fields)
            journal.settle_entries(conn, run_id, settlements)
            values = {p: v for s in settlements for p, v in s.key_values.items()}
            for kind, rows in (("failed", [r for s in settlements for r in s.failed]),
                               ("in_doubt", [r for s in settlements for r in s.in_doubt]),
                               ("unmapped", [r for s in settlements for r in s.unmapped]),
                               ("duplicate", [r for s in settlements for r in s.duplicated])):
                insert_errors(conn, run_id, integration, kind, rows, values)
            insert_acks(conn, integration, acked_rows)
            if progress is not None and move_cursor:
                set_cursor(conn, integration, progress)

    def drop_pending(self, run_id: str, integration: str, name_duplicates: bool = False) -> int:
        """Forget entries left pending by a crash whose rows will be sent again; with
        `name_duplicates` (a kind that is not idempotent), name their rows as possibly doubled
        (from the keys the journal kept) in the same transaction."""
        with self.engine.begin() as conn:
            pending = journal.pending_entries(conn, run_id)
            if name_duplicates:
                insert_errors(conn, run_id, integration, "duplicate",
                              journal.named_items(pending, AFTER_KILL),
                              journal.named_key_values(pending))
            return journal.delete_pending(conn, run_id)

    def forget_unsent(self, run_id: str, req_nos: Sequence[int], owner: str | None = None
                      ) -> None:
        """Take out of the journal pending requests known never to have been processed (a
        stop came before they left, or after attempts the service refused unprocessed), so
        the run that resumes reads their rows again and sends them: neither in doubt nor
        settled. Fenced on `owner` if given."""
        if not req_nos:
            return
        with self.engine.begin() as conn:
            update_run(conn, run_id, owner)
            gone = journal.delete_pending(conn, run_id, req_nos)
            update_run(conn, run_id, added={"requests_sent": -gone})

    def mark_pending_in_doubt(self, run_id: str, integration: str) -> set[int]:
        """Entries left pending by a crash, not to be sent again: their rows are in doubt, and
        named (from the keys the journal kept) in the same transaction, so no later kill can
        lose their names. Returns the entries whose keys were not kept (journaled by an
        older version, or grouped): their rows are named when read again."""
        reason = IN_FLIGHT_AT_CRASH
        with self.engine.begin() as conn:
            pending = journal.pending_entries(conn, run_id)
            journal.pending_in_doubt(conn, run_id, reason)
            insert_errors(conn, run_id, integration, "in_doubt",
                          journal.named_items(pending, reason), journal.named_key_values(pending))
        return {r.req_no for r in pending if r.item_keys is None}

    def finish_run(self, run_id: str, job_status: str, message: str | None = None,
                   counts: RunCounts | None = None) -> None:
        """Close the run's row with its counts (journal and row errors; `counts` if the
        caller has just read them, as `counts` returns them), then compact its journal."""
        counts = self.counts(run_id) if counts is None else counts
        with self.engine.begin() as conn:
            close_run(conn, run_id, job_status, message, counts)
        self.compact_journal(run_id)
