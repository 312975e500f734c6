"""One run of one integration, as one straight loop: resume → read → transform → pack → send
→ settle.

Invariants (DESIGN rules 1–5 and 7):
- the window is fixed when the run opens; a resumed run re-reads the same window from its
  progress and skips the ranges its journal already settled (`resume`);
- a request is journaled before it leaves; the cursor moves only over the longest prefix of
  settled segments (`progress`, `send_loop`);
- two requests that touch the same user are never in flight at once (`send_loop`);
- every row read ends as synced, rejected, failed or in doubt.
- the state database lost (`StateUnavailable`) stops the run resumable: what was in flight is
  saved if the database answers one more time, and the run is never finished after it (the
  next run resumes it as after a crash).
The loop is blind to its features: what differs between kinds is asked of the integration's
`Kind`, what a run covers of its `Scope` (`run.scope`: the whole run, or a partition), and
features such as the field diff plug in as stages (`run.stage`). Nothing here branches on a
kind's name, on partitions or on the diff. No Prefect here: flows call `run_sync` through
`adapters.wiring`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy.engine import Engine

from engage_sync.cursor.progress import Cursor, Progress, may_move_cursor
from engage_sync.cursor.window import Window
from engage_sync.deliver.deliverer import Deliverer, attempt_timeout
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.errors import (
    NOT_THE_RUNS_FAILURE,
    RunRefused,
    RunStopped,
    StateUnavailable,
    SyncError,
)
from engage_sync.read.extract import count_rows
from engage_sync.read.key_digest import stored_cursor
from engage_sync.read.null_cursors import count_skipped
from engage_sync.read.plan import RunPlan
from engage_sync.read.reader import Drops, Reader
from engage_sync.read.sent_rows import SentRows, shared
from engage_sync.run import ending
from engage_sync.run.cutter import Cutter
from engage_sync.run.journaling import send_loop_for
from engage_sync.run.lease import Lease, new_owner
from engage_sync.run.resume import Opened, Skipper, open_run
from engage_sync.run.rows import RowRouter
from engage_sync.run.running_counts import CountsShown
from engage_sync.run.scope import Scope, WholeRun
from engage_sync.run.send_loop import RunContext, SendLoop
from engage_sync.run.stages import bind_run, stages_for
from engage_sync.run.stop import StopRequest
from engage_sync.run.windows import Windows
from engage_sync.state.store import StateStore
from engage_sync.status.record import record

log = logging.getLogger(__name__)


@dataclass
class Deps:
    """What a run needs from outside, passed in (tests hand in fakes or loopback servers)."""

    engine: Engine
    state: StateStore
    transport: httpx.BaseTransport  # the keep-alive pool to the service (resources.http_transport)
    api_key: str
    budgets: RateBudgets = field(default_factory=RateBudgets)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    on_progress: Callable[[dict[str, int]], None] | None = None
    stop: StopRequest | None = None  # set to stop the run gracefully (SIGTERM), resumable


def run_sync(plan: RunPlan, deps: Deps, scope: Scope | None = None) -> dict[str, Any]:
    """Run (or resume) one sync of `plan` over `scope` (the whole run by default, or one
    partition of a partitioned run), and return its status record."""
    if plan.options.dry_run:
        raise ValueError("use dry_run() for a dry run")
    return Run(plan, deps, scope or WholeRun()).execute()


class Run:
    """One run's parts, built once from its plan: its scope, reader and stages."""

    def __init__(self, plan: RunPlan, deps: Deps, scope: Scope) -> None:
        self.plan, self.deps, self.scope = plan, deps, scope
        self.i, self.kind, self.options = plan.integration, plan.kind, plan.options
        self.resend_in_doubt, self.lookback = plan.resend_in_doubt, plan.lookback
        self.run_name = scope.run_name(plan.name)
        self.stored: Cursor | None = stored_cursor(deps.state, self.i)  # at the open
        self.windows = Windows(plan, deps.engine)
        self.stages = stages_for(plan, deps.state, scope.own_process)
        drops = self._drops()
        self.reader = Reader(plan, deps.engine, deps.state, drops)
        self.counts = {"read": 0, "requests": 0, "synced": 0, "failed": 0, "rejected": 0,
                       "in_doubt": 0, "unchanged": 0}
        self.run_id = ""
        self.window_rows: int | None = None  # counted once when someone watches progress
        self.owner = new_owner()
        self.lease: Lease | None = None
        self.shown = CountsShown(lambda: deps.state.show_counts(self.run_id))  # mid-way

    def _drops(self) -> Drops:
        """Lookback drops rows acknowledged before; a backfill of events drops what
        incremental runs sent or will send, unless told to resend."""
        drops = Drops(lookback=bool(self.lookback), stored=self.stored,
                      only=self.scope.only_keys, newest_by=self.kind.newest_by(self.i))
        if (self.options.mode == "backfill" and not self.kind.idempotent
                and not self.options.resend_events):
            state, modes = self.deps.state, ("incremental", "full_resync", "retry")

            def sent() -> SentRows:  # the cursor (read at the run's open) before the journal
                with closing(state.settled_entries(self.i.name, modes)) as entries:
                    return SentRows.from_entries(entries, self.stored)

            siblings = self.scope.siblings  # partitions of one backfill: one copy a process
            drops.sent = sent() if siblings is None else shared(
                (state.engine.url, self.i.name, siblings), sent)
        return drops

    # the run -------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        try:
            return self._open_and_execute()
        finally:  # a copy shared with sibling runs goes with the last of them (`sent_rows.shared`)
            self.reader.drops.sent = None

    def _open_and_execute(self) -> dict[str, Any]:
        state = self.deps.state
        done = self.scope.finished(state, self.run_name)
        if done is not None:  # run again (a cluster recomputing a lost result): nothing to do
            log.info("integration %s: %s finished already", self.i.name, self.run_name)
            return record(done)
        opened = open_run(state, self.run_name, self.options.mode,
                          self.scope.resume_key(self.options), self.resend_in_doubt,
                          self.new_window, self.windows.before,
                          name_duplicates=self.kind.names_duplicates(self.i),
                          owner=self.owner, lease_seconds=self.i.lease_seconds)
        opened.window = self.scope.narrow(opened.window)
        self.run_id = opened.run_id
        bind_run(self.stages, self.run_id)  # stages that record per run (the row trace)
        self.lease = lease = Lease(state, self.run_id, self.owner, self.i.lease_seconds).start()
        try:
            self._execute(opened)
            # KeyboardInterrupt, crashes: the run stays `running` so the next start resumes it
            self._keep_failed(opened.window)
            ending.finish(state, self.run_id, self.i.name)
        except RunStopped as exc:
            lease.stop()  # no heartbeat may renew the lease released here
            raise ending.stopped(state, self.run_id, self.owner, self.i.name, exc) from None
        except StateUnavailable as exc:
            lease.stop()
            ending.release_if_back(state, self.run_id, self.owner, self.i.name, exc)
            raise
        finally:
            lease.stop()
            self.stages.stop()  # after the row is closed: a field helper's copy of the WAL
            # into the state file overlaps that (`diff.stage.Differ.stop`)
        return record(state.run(self.run_id))

    def _execute(self, opened: Opened) -> None:
        try:
            if self.scope.counts_null_cursors:
                count_skipped(self.i, self.deps.engine, self.reader.spec, self.deps.state,
                              self.run_id)
            self._check_delete_cap(opened.window)
            self._count_window(opened.window)
            self._stream(opened)
        except NOT_THE_RUNS_FAILURE:
            raise  # another process's run now, stopped resumable, or the state database lost
            # (finishing the run once it is back would leave a request unsettled): not recorded
        except SyncError as exc:
            if not self.scope.resumes_after_error:
                self._keep_failed(opened.window)
            self.scope.failed(self.deps.state, self.run_id, self.owner, self.i.name, exc)
            raise

    def _stream(self, opened: Opened) -> None:
        """The loop: each batch read goes through the stages, then each row is skipped
        (settled before), packed (an item) or passed (a reject, or unchanged); full requests
        go to the send loop, which settles them."""
        window = opened.window
        progress = Progress(window.start)
        loop = self._send_loop(progress)
        self.stages.open()
        cutter = Cutter(self.kind.packer(self.i), progress, loop.submit, window.start,
                        opened.last_req, bool(self.lookback))
        router = RowRouter(self.stages, cutter, Skipper(opened.done, window.start),
                           opened.crashed, self.counts, self._record_in_doubt)
        try:
            for rows in self.reader.batches(window, self._record_rejects):
                if self.deps.stop is not None:
                    self.deps.stop.check()  # asked to stop: no new batch
                router.route(rows)
                unchanged, saved = self.stages.take_counts()
                self.deps.state.add_saved_counts(self.run_id, unchanged + rows.superseded,
                                                 saved + rows.superseded_points)
            cutter.finish()
            loop.drain()
            self.stages.close()
        except SyncError:  # the state database lost too: saving what is in flight is tried
            # once more (a restarted server's new connection), else raises StateUnavailable
            loop.settle_in_flight()
            raise
        finally:
            loop.close()

    def _keep_failed(self, window: Window) -> None:
        """Keep the run's failed requests for later runs, with one more try than this run's
        rows had (`ending.keep_failed`)."""
        ending.keep_failed(self.deps.state, self.plan, self.run_id, window, self.scope.tries + 1)

    def _record_rejects(self, rejects: list[tuple[str, str, str]]) -> None:
        self.deps.state.record_rejects(self.run_id, self.i.name, rejects)

    def _record_in_doubt(self, errors: list[tuple[str, str, str]]) -> None:
        self.deps.state.record_errors(self.run_id, self.i.name, "in_doubt", errors)

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
            log_context={"integration": self.i.name}, guard=self._may_send,
            sleep=self.deps.stop.sleep if self.deps.stop is not None else time.sleep,
        )
        mode, stored, moves = self.options.mode, self.stored, self.scope.moves_cursor
        return send_loop_for(RunContext(
            run_id=self.run_id, integration=self.i.name, state=self.deps.state,
            deliverer=deliverer, max_in_flight=service.max_in_flight,
            group_commits=self.kind.group_commits, resend_in_doubt=self.resend_in_doubt,
            bulk=mode in ("backfill", "full_resync"),
            may_move_cursor=lambda position: may_move_cursor(mode, stored, position,
                                                             not moves),
            counts=self.counts, report=self.report, on_settled=self.stages.settled,
            names_duplicates=self.kind.names_duplicates(self.i),
            owner=self.owner, budget_holds=deliverer.budget_holds,
            idle=lambda: self.deps.state.compact_journal(self.run_id, owner=self.owner),
        ), progress)

    # opening -------------------------------------------------------------------------------
    def new_window(self) -> Window:
        """The window of a new run of this scope (`Scope.new_window`)."""
        return self.scope.new_window(self.windows, self.deps.state, self.stored,
                                     self.deps.clock())

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

    def _may_send(self) -> None:
        """Before every attempt to send: LeaseLost once this process may no longer own the
        run, RunStopped once the run is asked to stop."""
        if self.lease is not None:
            self.lease.check()
        if self.deps.stop is not None:
            self.deps.stop.check()

    def _count_window(self, window: Window) -> None:
        """The window's row count (one COUNT query), for progress lines only."""
        if self.deps.on_progress is not None:
            self.window_rows = count_rows(self.deps.engine, self.reader.spec, window)
            self.report()

    def report(self) -> None:
        """Counts so far to `on_progress`, with `window_rows` once counted, and (throttled)
        onto the run's row, for its record mid-way."""
        self.shown.tick()
        if self.deps.on_progress is not None:
            extra = {} if self.window_rows is None else {"window_rows": self.window_rows}
            self.deps.on_progress({**self.counts, **extra})

