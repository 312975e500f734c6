"""A partitioned run: one window, split by a stable hash of the user key into N partitions
that run at once, each a run of its own (`partitions.scope.PartitionScope`), under a parent
run.

Invariants:
- every user's rows are in exactly one partition (`key_digest.key_bucket`, computed by the
  warehouse), so one user's rows keep their order, and the users-in-flight rule of one run
  holds across the partitions;
- the window is the parent's, fixed when it opens; partitions never move the integration
  cursor: this coordinator moves it to `progress.partitions_settled` (the least progress of the
  partitions still open) whenever it looks, and never backwards (`may_move_cursor`);
- a parent left unfinished (a kill, or a partition that stopped on an error) is resumed by the
  next start with its own number of partitions: finished partitions are not run again, the
  others resume from their own progress and journal (their in-doubt policy applies as in any
  resumed run);
- a partition that finished is never run again, whoever asks (`PartitionScope`: Dask recomputes
  the results a dead worker held);
- an unfinished run opened unpartitioned is resumed unpartitioned (its journal is one run's);
- one run per integration: the parent holds the integration's lease while its partitions run.
How partitions are executed (threads, Prefect task runners, Dask) is handed in (`Execute`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import SecretStr
from sqlalchemy.engine import Engine

from engage_sync.config import partition_names
from engage_sync.config.integration import Integration, partition_problem
from engage_sync.config.run_options import RunOptions
from engage_sync.cursor.progress import (
    PartitionProgress,
    RunMode,
    decode_cursor,
    may_move_cursor,
    partitions_settled,
)
from engage_sync.cursor.window import Window
from engage_sync.errors import ConfigError, SyncError
from engage_sync.read import duckdb_turns, key_digest
from engage_sync.read.extract import count_rows
from engage_sync.read.null_cursors import count_skipped
from engage_sync.read.plan import RunPlan
from engage_sync.run.lease import Lease, new_owner
from engage_sync.run.resume import open_run
from engage_sync.run.windows import Windows
from engage_sync.state.store import StateStore
from engage_sync.status.record import job_message, job_status, record

log = logging.getLogger("engage_sync.partitions.coordinator")


@dataclass(frozen=True)
class PartitionJob:
    """What a worker needs to run one partition: descriptors only, never data or secrets.
    Secrets reach the worker by the names of environment variables the integration file gives
    (API key, warehouse password, budget URL); the state URL, which may hold a password, is a
    SecretStr (shown as '**********' in parameters and logs), or None: the worker's
    ENGAGE_SYNC_STATE_URL."""

    path: str
    index: int
    count: int
    parent: str
    mode: RunMode
    start: datetime | None
    end: datetime | None
    resend_events: bool
    state_url: SecretStr | None = None
    read_only: bool = False
    """Open the warehouse read-only (a DuckDB file is opened by several worker processes at
    once only read-only)."""
    send_whole: bool = False

    @property
    def label(self) -> str:
        return partition_names.label(self.index, self.count)

    def options(self) -> RunOptions:
        return RunOptions(mode=self.mode, start=self.start, end=self.end,
                          resend_events=self.resend_events, send_whole=self.send_whole)


Execute = Callable[[list[PartitionJob], Callable[[], None]], list[BaseException | None]]
"""Runs the jobs at once and returns each one's error (None: it returned), in job order;
calls the tick function every few seconds while waiting (the coordinator moves the cursor)."""


class PartitionStopped(SyncError):
    """A partition of a partitioned run stopped before reading its whole window: the run is
    left resumable."""


def partitions_to_run(asked: int, children: Sequence[str], parent_touched: bool) -> int:
    """How many partitions a start runs (pure). An unfinished run keeps what it was opened
    with: its partitions' count, or 1 when it ran unpartitioned (it sent or recorded rows
    itself); a new run (or one that did nothing yet) takes `asked`."""
    counts = {p[1] for p in map(partition_names.parse, children) if p is not None}
    if counts:
        return max(counts)
    return 1 if parent_touched else asked


def count_for(store: StateStore, plan: RunPlan) -> int:
    """The partitions this start of the plan's integration runs (see `partitions_to_run`),
    with a log line when an unfinished run decides it against what was asked. Raises
    ConfigError when the integration cannot run in that many (`partition_problem`): asked
    before anything is read or sent, with the run's other settings."""
    integration, options, asked = plan.integration, plan.options, plan.partitions
    run = store.unfinished_run(integration.name, options.mode, options.scope)
    count = asked if run is None else _resumed_count(store, run, asked)
    if run is not None and count != asked:
        log.info("integration %s: resuming unfinished run %s in %d partition(s), as it was "
                 "opened (asked: %d)", integration.name, run["seq"], count, asked)
    problem = partition_problem(integration, count)
    if problem is not None:
        raise ConfigError(f"integration {plan.name}: {problem}", key="partitions")
    return count


def _resumed_count(store: StateStore, run: dict[str, Any], asked: int) -> int:
    children = [r["integration"] for r in store.partition_runs(run["run_id"])]
    counts = store.counts(run["run_id"])
    touched = bool(run["requests_sent"] or counts.rejected or counts.failed or counts.in_doubt)
    return partitions_to_run(asked, children, touched)


@dataclass
class _Partitions:
    """The coordinator of one partitioned run (parent `run_id` on `window`)."""

    integration: Integration
    store: StateStore
    options: RunOptions
    run_id: str
    window: Window
    count: int
    on_progress: Callable[[dict[str, int]], None] | None = None
    window_rows: int | None = None

    def latest(self) -> dict[int, dict[str, Any]]:
        """Each partition's latest run row."""
        rows: dict[int, dict[str, Any]] = {}
        for row in self.store.partition_runs(self.run_id):
            parsed = partition_names.parse(row["integration"])
            if parsed is not None and parsed[1] == self.count:
                rows[parsed[0]] = row
        return rows

    def progress(self) -> list[PartitionProgress]:
        rows = self.latest()
        return [PartitionProgress(decode_cursor(rows[k]["progress"]),
                                  rows[k]["job_status"] != "running")
                if k in rows else PartitionProgress(self.window.start, False)
                for k in range(self.count)]

    def tick(self) -> None:
        """Move the parent's progress, and the cursor (never backwards), to where every
        partition has settled."""
        self.report()
        settled = partitions_settled(self.progress())
        if settled is None:
            return
        i = self.integration
        stored = key_digest.stored_cursor(self.store, i)
        self.store.advance(self.run_id, i.name, settled,
                           move_cursor=may_move_cursor(self.options.mode, stored, settled))

    def report(self) -> None:
        """The partitions' settled counts together to `on_progress` (rows in flight are not
        in them yet)."""
        if self.on_progress is None:
            return
        synced, failed, rejected, in_doubt = self.store.counts_of_partitions(self.run_id)
        counts = {"read": synced + failed + rejected + in_doubt, "synced": synced,
                  "failed": failed, "rejected": rejected, "in_doubt": in_doubt}
        if self.window_rows is not None:
            counts["window_rows"] = self.window_rows
        self.on_progress(counts)

    def unfinished(self) -> list[int]:
        rows = self.latest()
        return [k for k in range(self.count)
                if k not in rows or rows[k]["job_status"] == "running"]


def run_partitioned(path: str, plan: RunPlan, store: StateStore, engine: Engine, count: int,
                    execute: Execute, clock: Callable[[], datetime],
                    state_url: SecretStr | None = None,
                    on_progress: Callable[[dict[str, int]], None] | None = None
                    ) -> dict[str, Any]:
    """Open (or resume) the parent run, run its unfinished partitions through `execute`, move
    the cursor as they settle, and finish the parent with their summed record. `count` is
    `count_for`'s, checked there. Raises PartitionStopped (the run left resumable) when a
    partition stopped early."""
    integration, options, name = plan.integration, plan.options, plan.name
    owner, windows = new_owner(), Windows(plan, engine)
    stored = key_digest.stored_cursor(store, integration)
    opened = open_run(store, name, options.mode, options.scope, True,
                      lambda: windows.new(store, stored, clock()), windows.before, owner=owner,
                      lease_seconds=integration.lease_seconds)
    window = opened.opened_on
    lease = Lease(store, opened.run_id, owner, integration.lease_seconds).start()
    parts = _Partitions(integration, store, options, opened.run_id, window, count, on_progress)
    try:
        count_skipped(integration, engine, plan.spec, store, opened.run_id)
        if on_progress is not None:  # one COUNT, for progress lines only
            parts.window_rows = count_rows(engine, plan.spec, window)
        duckdb_turns.release(engine)  # before workers open the warehouse (one writer a file)
        read_only = integration.task_runner.separate_processes
        if read_only:
            duckdb_turns.let_go()  # a folder's held file too: the workers are other processes
        jobs = [PartitionJob(path, k, count, opened.run_id, options.mode, options.start,
                             options.end, options.resend_events, state_url, read_only,
                             options.send_whole)
                for k in parts.unfinished()]
        log.info("integration %s: run %s in %d partitions (%d to run)", name,
                 store.run(opened.run_id)["seq"], count, len(jobs))
        errors = execute(jobs, parts.tick) if jobs else []
        parts.tick()
        left = parts.unfinished()
        if left:
            raise _stopped(name, jobs, errors, left)
    except BaseException as exc:
        lease.stop()
        store.release_lease(opened.run_id, owner, message=str(exc)[:1000])
        raise
    lease.stop()
    counts = (*store.counts_of_partitions(opened.run_id),
              sum(int(r.get("rows_unchanged") or 0) for r in store.partition_runs(opened.run_id)))
    store.finish_partitioned(opened.run_id, job_status(*counts),
                             message=job_message(name, *counts))
    return record(store.run(opened.run_id))


def _stopped(name: str, jobs: list[PartitionJob], errors: list[BaseException | None],
             left: list[int]) -> PartitionStopped:
    """The error of a run whose partitions `left` did not finish: the first partition error."""
    first = next(((j, e) for j, e in zip(jobs, errors, strict=False) if e is not None), None)
    why = (f"partition {first[0].label} stopped: {first[1]}" if first is not None
           else "partitions did not finish")
    return PartitionStopped(
        f"integration {name}: {why}; partitions {', '.join(map(str, left))} of "
        f"{jobs[0].count if jobs else '?'} are unsettled, the others' work is kept: run it "
        "again to resume them")
