"""One run of one integration, as one straight loop: resume → read → transform → pack → send
→ settle.

Invariants (DESIGN rules 1–5 and 7):
- the window is fixed when the run opens; a resumed run re-reads the same window from its
  progress and skips the ranges its journal already settled (`resume`);
- a request is journaled before it leaves; the cursor moves only over the longest prefix of
  settled segments (`progress`, `send_loop`);
- two requests that touch the same user are never in flight at once (`send_loop`);
- every row read ends as synced, rejected, failed or in doubt.
What differs between kinds is asked of the integration's `Kind`; nothing here branches on a
kind's name. No Prefect here: flows call `run_sync` through `wiring`.

One partition of a partitioned run (`PartitionOf`, see `partitioned.py`) is such a run too, on
the rows of its users only: a run row of its own (`<integration>#k/N`, scope = the parent run)
on the parent's window, its own journal, progress and lease. It never moves the integration
cursor, and a SyncError leaves it resumable (its unsent entries forgotten, its lease given up)
rather than finished, so the parent run resumes exactly what it had not settled. A partition
that finished is never run again (Dask recomputes the lost results of a dead worker, which
would otherwise send a finished partition's rows a second time).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy.engine import Engine

from engage_sync import kinds
from engage_sync.config.integration import Integration, partition_suffix
from engage_sync.cursor.progress import (
    Cursor,
    Mode,
    Progress,
    decode_cursor,
    encode_cursor,
    may_move_cursor,
    stamp,
)
from engage_sync.cursor.window import Window, align, backfill_window, incremental_window
from engage_sync.deliver.deliverer import Deliverer, attempt_timeout
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.diff.helper import FieldHelper, helper_after, shareable_url
from engage_sync.diff.stage import UNCHANGED, Differ
from engage_sync.errors import ConfigError, LeaseLost, RunRefused, SyncError
from engage_sync.items import Item
from engage_sync.read import key_digest
from engage_sync.read.extract import count_rows, sample_cursor
from engage_sync.read.null_cursors import count_skipped
from engage_sync.read.reader import Drops, Reader, source_spec
from engage_sync.read.sent_rows import SentRows
from engage_sync.run.cutter import Cutter
from engage_sync.run.lease import Lease, new_owner
from engage_sync.run.resume import Opened, Skipper, open_run
from engage_sync.run.send_loop import RunContext, SendLoop
from engage_sync.state.store import IN_FLIGHT_AT_CRASH, StateStore
from engage_sync.status.record import job_message, job_status, record

log = logging.getLogger("engage_sync.run.loop")


@dataclass(frozen=True)
class RunOptions:
    """How to run. A backfill reads rows with start <= cursor < end, sends them with the bulk
    header, never moves the incremental cursor, and skips events and purchases that an
    incremental run already sent, unless `resend_events`."""

    mode: Mode = "incremental"
    dry_run: bool = False
    start: datetime | None = None
    end: datetime | None = None
    resend_events: bool = False
    allow_deletes: int | None = None
    partitions: int | None = None
    """Split the run into this many partitions (None: the integration's `partitions`)."""

    @property
    def scope(self) -> str | None:
        """What makes a backfill run resumable: its range."""
        if self.mode != "backfill":
            return None
        return encode_cursor([self.start, self.end])


def run_options(mode: Mode, start: datetime | None, end: datetime | None, dry_run: bool,
                resend_events: bool, allow_deletes: int | None = None,
                partitions: int | None = None) -> RunOptions:
    """Parameters (CLI, flow, backfill) → RunOptions. Naive datetimes are UTC. Raises
    ConfigError when start or end is given outside a backfill, or start is not before end."""
    start, end = as_utc(start), as_utc(end)
    if (start or end) and mode != "backfill":
        raise ConfigError(f"start and end apply to mode 'backfill' only, not '{mode}'")
    if start and end and start >= end:
        raise ConfigError(f"start {start.isoformat()} is not before end {end.isoformat()}")
    if partitions is not None and partitions < 1:
        raise ConfigError(f"partitions must be at least 1, not {partitions}", key="partitions")
    return RunOptions(mode=mode, dry_run=dry_run, start=start, end=end,
                      resend_events=resend_events, allow_deletes=allow_deletes,
                      partitions=partitions)


def as_utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class PartitionOf:
    """Partition `index` of `count` of the partitioned run `parent` (a run id)."""

    parent: str
    index: int
    count: int

    def run_name(self, integration: str) -> str:
        """The partition's name in the runs table (cursors, errors and records keep the
        integration's own name)."""
        return integration + partition_suffix(self.index, self.count)


@dataclass
class Deps:
    """What a run needs from outside, passed in (tests hand in fakes or loopback servers)."""

    engine: Engine
    state: StateStore
    transport: httpx.BaseTransport  # the keep-alive pool to the service (wiring.http_transport)
    api_key: str
    budgets: RateBudgets = field(default_factory=RateBudgets)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    on_progress: Callable[[dict[str, int]], None] | None = None
    field_helper_after: int | None = field(
        default_factory=lambda: helper_after(os.environ))
    """Items a first diffed run digests before a helper process takes over (`field_helper`)."""


def run_sync(integration: Integration, deps: Deps, options: RunOptions = RunOptions(),
             partition: PartitionOf | None = None) -> dict[str, Any]:
    """Run (or resume) one sync, or one partition of a partitioned run, and return its status
    record."""
    if options.dry_run:
        raise ValueError("use dry_run() for a dry run")
    return _Run(integration, deps, options, partition).execute()


class _Run:
    def __init__(self, integration: Integration, deps: Deps, options: RunOptions,
                 partition: PartitionOf | None = None) -> None:
        self.i, self.deps, self.options = integration, deps, options
        self.partition = partition
        self.run_name = integration.name if partition is None else partition.run_name(
            integration.name)
        self.kind = kinds.kind_of(integration)
        self.resend_in_doubt = self.kind.resends_in_doubt(integration)  # decided once, here
        self.lookback = integration.lookback if options.mode == "incremental" else None
        self.stored: Cursor | None = key_digest.migrate(  # the cursor when the run opened
            deps.state.cursor(integration.name), integration.key_columns,
            integration.hidden_key_columns)
        # a full resync and a backfill re-send what they read whole, and refresh the record
        self.differ = Differ(
            integration.name, deps.state, refresh=options.mode != "incremental",
            start_helper=self._start_field_helper,
            # not in a partition (a Dask worker) nor a dry run (nothing is recorded)
            helper_after=None if partition or options.dry_run else deps.field_helper_after,
        ) if self.kind.diffs(integration) else None
        self.reader = Reader(integration, self.kind, deps.engine, deps.state, self._drops(),
                             self.differ)
        self.counts = {"read": 0, "requests": 0, "synced": 0, "failed": 0, "rejected": 0,
                       "in_doubt": 0}
        self.run_id = ""
        self.window_rows: int | None = None  # counted once when someone watches progress
        self.owner = new_owner()
        self.lease: Lease | None = None

    def _start_field_helper(self) -> FieldHelper | None:
        """A first diffed run's helper process (`field_helper`), if the state database can be
        shared with it."""
        url = shareable_url(self.deps.state.engine)
        if url is None:
            return None
        log.info("integration %s: a helper process records the fields of this first diffed "
                 "run", self.i.name)
        return FieldHelper(self.i.name, url)

    def _drops(self) -> Drops:
        """Lookback drops rows acknowledged before; a backfill of events drops what
        incremental runs sent or will send, unless told to resend."""
        drops = Drops(lookback=bool(self.lookback), stored=self.stored)
        if (self.options.mode == "backfill" and not self.kind.idempotent
                and not self.options.resend_events):
            drops.sent = SentRows.from_entries(self.deps.state.settled_ranges(
                self.i.name, ("incremental", "full_resync")))
            drops.top = self.stored
        return drops

    # the run -------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        state = self.deps.state
        part = self.partition
        if part is not None:  # run again (a cluster recomputing a lost result): nothing to do
            done = [r for r in state.partition_runs(part.parent)
                    if r["integration"] == self.run_name and r["job_status"] != "running"]
            if done:
                log.info("integration %s: partition %s/%s finished already", self.i.name,
                         part.index, part.count)
                return record(done[-1])
        opened = open_run(state, self.run_name, self.options.mode,
                          self.options.scope if part is None else part.parent,
                          self.resend_in_doubt, self.new_window, self._before,
                          idempotent=self.kind.idempotent, owner=self.owner,
                          lease_seconds=self.i.lease_seconds)
        if part is not None:
            opened.window = replace(opened.window, partition=(part.index, part.count))
        self.run_id = opened.run_id
        self.lease = lease = Lease(state, self.run_id, self.owner, self.i.lease_seconds).start()
        try:
            self._execute(opened)
            # KeyboardInterrupt, crashes: the run stays `running` so the next start resumes it
            counts = state.counts(self.run_id)
            tally = (counts.synced, counts.failed, counts.rejected, counts.in_doubt)
            state.finish_run(self.run_id, job_status(*tally),
                             message=job_message(self.i.name, *tally))
        finally:
            lease.stop()
        return record(state.run(self.run_id))

    def _execute(self, opened: Opened) -> None:
        state = self.deps.state
        try:
            if self.partition is None:  # the parent run counts them once
                count_skipped(self.i, self.deps.engine, self.reader.spec, state, self.run_id)
            self._check_delete_cap(opened.window)
            self._count_window(opened.window)
            self._stream(opened)
        except LeaseLost:
            raise  # the run is another process's now: leave its record alone
        except SyncError as exc:
            if self.partition is not None:  # resumable: what it settled stays, nothing else
                state.drop_pending(self.run_id, self.i.name)  # never sent (settle_in_flight)
                state.release_lease(self.run_id, self.owner, message=str(exc))
                raise
            state.finish_run(self.run_id,
                             "config_error" if isinstance(exc, ConfigError) else "error",
                             message=str(exc))
            raise

    def _stream(self, opened: Opened) -> None:
        """The loop: each row read is skipped (settled before), packed (an item) or passed
        (a reject); full requests go to the send loop, which settles them."""
        window, counts = opened.window, self.counts
        progress = Progress(window.start)
        skipper = Skipper(opened.done, window.start)
        loop = self._send_loop(progress)
        if self.differ is not None:
            self.differ.open()
        cutter = Cutter(self.kind.packer(self.i), progress, loop.submit, window.start,
                        max((e.req_no for e in opened.done), default=0), bool(self.lookback))
        try:
            for rows in self.reader.batches(window, self._record_rejects):
                crashed: list[tuple[str, str, str]] = []
                for k, outcome in enumerate(rows.outcomes):
                    if outcome is None:
                        continue
                    entry = skipper.settled(rows.cursor(k)) if skipper else None
                    if entry is not None:  # settled by an earlier attempt: not sent again
                        if isinstance(outcome, Item) and self.differ is not None:
                            self.differ.release((outcome,))  # never pending: not sent
                        if entry.req_no in opened.crashed and isinstance(outcome, Item):
                            crashed.append(_crash_error(rows.cursor(k), outcome.key))
                        cutter.skip(entry.start, tuple(entry.end))
                        continue
                    if outcome is UNCHANGED:  # the diff: nothing to send, pass it
                        cutter.passed(rows, k)
                        continue
                    counts["read"] += 1
                    if isinstance(outcome, Item):
                        cutter.add(rows, k, outcome)
                    else:
                        counts["rejected"] += 1
                        cutter.passed(rows, k)
                if crashed:  # name the rows of requests in flight at a crash, once known
                    self.deps.state.record_errors(self.run_id, self.i.name, "in_doubt",
                                                  crashed)
                if self.differ is not None:
                    self.deps.state.add_diff_counts(self.run_id, *self.differ.take_counts())
            cutter.finish()
            loop.drain()
            if self.differ is not None:
                self.differ.close()
        except SyncError:
            loop.settle_in_flight()
            raise
        finally:
            loop.close()
            if self.differ is not None:
                self.differ.stop()

    def _record_rejects(self, rejects: list[tuple[str, str, str]]) -> None:
        self.deps.state.record_rejects(self.run_id, self.i.name, rejects)

    def _send_loop(self, progress: Progress) -> SendLoop:
        service = self.i.service
        if "rate_limit" in service.model_fields_set:
            # an explicit rate tightens the budget shared by every run of this process
            self.deps.budgets.budget(
                service.base_url, self.kind.rate_group(self.i),
                requests=service.rate_limit.requests,
                per_seconds=service.rate_limit.per_seconds)
        deliverer = Deliverer(
            transport=self.deps.transport, api_key=self.deps.api_key, budgets=self.deps.budgets,
            base_url=service.base_url, retry_deadline=service.retry_deadline_seconds,
            timeout=attempt_timeout(service.timeout_seconds),
            log_context={"integration": self.i.name}, guard=self._check_lease,
        )
        mode, stored = self.options.mode, self.stored
        return SendLoop(RunContext(
            run_id=self.run_id, integration=self.i.name, state=self.deps.state,
            deliverer=deliverer, max_in_flight=service.max_in_flight,
            group_commits=self.kind.group_commits, resend_in_doubt=self.resend_in_doubt,
            bulk=mode != "incremental",
            may_move_cursor=lambda position: may_move_cursor(mode, stored, position,
                                                             self.partition is not None),
            counts=self.counts, report=self.report,
            on_settled=None if self.differ is None else self.differ.release,
            on_acked=None if self.differ is None else self.differ.acked,
            names_duplicates=self.resend_in_doubt and not self.kind.idempotent,
            owner=self.owner,
        ), progress)

    # opening -------------------------------------------------------------------------------
    def new_window(self) -> Window:
        """The window of a new run: a backfill's range, or from the stored cursor (none for a
        full resync) to the signpost; a partition's is its parent's."""
        if self.partition is not None:
            return parent_window(self.deps.state.run(self.partition.parent), self._before())
        return new_window(self.i, self.deps.engine, self.deps.state, self.options,
                          self.stored, self.deps.clock())

    def _before(self) -> Any:
        return window_before(self.i, self.deps.engine, self.options)

    def _check_delete_cap(self, window: Window) -> None:
        """An irreversible kind (deletes): refuse a run above `max_deletes` before sending
        anything, unless the run allows at least that many (`allow_deletes`)."""
        if not self.kind.irreversible:
            return
        cap = self.i.max_deletes
        rows = count_rows(self.deps.engine, self.reader.spec, window)
        allowed = max(cap, self.options.allow_deletes or 0)
        if rows > allowed:
            raise RunRefused(
                f"integration {self.i.name}: this run would delete {rows} users, more than "
                f"max_deletes ({cap}); nothing was sent. Check the source, then raise "
                f"max_deletes or rerun with --allow-deletes {rows}")

    def _check_lease(self) -> None:
        """Before every attempt to send: LeaseLost once this process may no longer own the
        run."""
        if self.lease is not None:
            self.lease.check()

    def _count_window(self, window: Window) -> None:
        """The window's row count (one COUNT query), for progress lines only."""
        if self.deps.on_progress is not None:
            self.window_rows = count_rows(self.deps.engine, self.reader.spec, window)
            self.report()

    def report(self) -> None:
        """Counts so far to `on_progress`, with `window_rows` once counted."""
        if self.deps.on_progress is not None:
            extra = {} if self.window_rows is None else {"window_rows": self.window_rows}
            self.deps.on_progress({**self.counts, **extra})


def new_window(integration: Integration, engine: Engine, state: StateStore, options: RunOptions,
               stored: Cursor | None, now: datetime) -> Window:
    """The window of a new run: a backfill's range, or from the stored cursor (none for a full
    resync) to the signpost. With lookback, acks below the re-read period are pruned."""
    spec, lag = source_spec(integration, kinds.kind_of(integration)), integration.settle_lag
    sample = sample_cursor(engine, spec)
    if options.mode == "backfill":
        return backfill_window(options.start, options.end, now, lag, sample)
    lookback = integration.lookback if options.mode == "incremental" else None
    window = incremental_window(None if options.mode == "full_resync" else stored, now, lag,
                                lookback, sample)
    if window.floor is not None:  # lookback: acks below the re-read period are not needed
        state.prune_acks(integration.name, stamp(window.floor))
    return window


def window_before(integration: Integration, engine: Engine, options: RunOptions) -> Any:
    """A resumed backfill's exclusive end, in the source's cursor type."""
    end = options.end if options.mode == "backfill" else None
    if end is None:
        return None
    return align(end, sample_cursor(engine, source_spec(integration,
                                                        kinds.kind_of(integration))))


def parent_window(run: dict[str, Any], before: Any) -> Window:
    """The window a run was opened on (its row: start, signpost, floor), whatever its progress."""
    signpost, floor = decode_cursor(run["signpost"]), decode_cursor(run["floor"])
    return Window(start=decode_cursor(run["window_start"]),
                  signpost=signpost[0] if signpost else None,
                  floor=floor[0] if floor else None, before=before)


def _crash_error(cursor: Cursor, key: str) -> tuple[str, str, str]:
    return (f"crash:{encode_cursor(cursor)}", key, IN_FLIGHT_AT_CRASH)


@dataclass
class DryRun:
    rows: int = 0
    requests: int = 0
    rejects: list[tuple[str, str]] = field(default_factory=list)
    sample: list[bytes] = field(default_factory=list)
    unchanged: int = 0
    points: int = 0
    saved: int = 0

    def summary(self, integration: str) -> dict[str, Any]:
        """What the run would send, after the field-level diff: counts (rows to send, rows
        unchanged, data points to send and saved), the first 100 rejects (keys and reasons)
        and a sample of objects (for an irreversible kind: every object it would send)."""
        return {"integration": integration, "dry_run": True, "rows": self.rows,
                "rows_unchanged": self.unchanged, "requests": self.requests,
                "data_points_sent": self.points, "data_points_saved": self.saved,
                "rejects": [list(r) for r in self.rejects[:100]],
                "sample": [b.decode() for b in self.sample]}


def dry_run(integration: Integration, engine: Engine, state: StateStore,
            clock: Callable[[], datetime] = lambda: datetime.now(UTC),
            options: RunOptions = RunOptions(dry_run=True), sample_size: int = 3) -> DryRun:
    """Read, validate and batch the next window without sending or recording anything.
    An irreversible kind (deletes) lists every object it would send (`sample`), not a sample."""
    if kinds.kind_of(integration).irreversible:
        sample_size = sys.maxsize
    with httpx.HTTPTransport() as transport:  # never used: nothing is sent
        run = _Run(integration, Deps(engine=engine, state=state, transport=transport, api_key="",
                                     clock=clock), options)
        packer = run.kind.packer(integration)
        result = DryRun()
        if run.differ is not None:  # a killed run's log folded: where, not what, is recorded
            run.differ.open()
        for outcome in run.reader.outcomes(run.new_window()):
            result.rows += 1
            if not isinstance(outcome, Item):
                result.rejects.append(outcome)
                continue
            result.points += outcome.points
            if len(result.sample) < sample_size:
                result.sample.append(outcome.blob)
            if packer.add(outcome) is not None:
                result.requests += 1
        if packer.flush() is not None:
            result.requests += 1
        if run.differ is not None:
            result.unchanged, result.saved = run.differ.take_counts()
    return result
