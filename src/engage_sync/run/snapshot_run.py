"""A run of an integration without a cursor (`changes: snapshot`): the loop over the users whose
result differs from the snapshot, which the warehouse computes when the run opens.

The run is the loop's own (`run.loop.Run`: journal, send, settle, resume), over the pending
table instead of the model: its numbered rows are the window, read in order, so a killed run
resumes where its journal says and sends nothing settled twice. The snapshot moves on only
over what the journal says was acknowledged (`snapshot.stage`), so nothing is lost either.

Invariants: the pending table is made only when a new run opens (a resume reads the one its
attempt made); a run refuses before any request when it would clear or delete more users than
`max_leaves` allows, or when the model returns a user twice; it keeps no failed requests for
later runs (the next comparison finds those users again).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync import kinds
from engage_sync.config.integration import Integration, Source
from engage_sync.config.snapshot import leave_cap
from engage_sync.cursor.progress import Cursor
from engage_sync.cursor.window import Window
from engage_sync.errors import ConfigError, RunRefused, SourceError
from engage_sync.read.extract import connected, first_line
from engage_sync.read.plan import RunPlan, source_spec
from engage_sync.run.loop import Deps, Run, run_sync
from engage_sync.run.scope import WholeRun
from engage_sync.run.stage import Stages
from engage_sync.snapshot import compare
from engage_sync.snapshot.advance import advance
from engage_sync.snapshot.audience import audience_kind, compared_source, layout_for
from engage_sync.snapshot.kind import pending_kind
from engage_sync.snapshot.layout import SEQ, Layout
from engage_sync.snapshot.stage import SnapshotStage
from engage_sync.state.store import StateStore

Sync = Callable[[RunPlan, Deps], dict[str, Any]]


def sync_of(plan: RunPlan) -> Sync:
    """How a run of this plan is made: by the snapshot, or by its cursor."""
    return snapshot_sync if plan.integration.changes == "snapshot" else run_sync


def snapshot_sync(plan: RunPlan, deps: Deps) -> dict[str, Any]:
    """Run (or resume) one snapshot run and return its status record."""
    options = plan.options
    if options.mode != "incremental" or options.dry_run:
        raise ConfigError(
            f"integration {plan.name}: 'changes: snapshot' runs compare the whole "
            f"result each time, in mode incremental only (not '{options.mode}')",
            key="changes")
    return SnapshotRun(plan, deps).execute()


def pending_integration(integration: Integration, layout: Layout) -> Integration:
    """The integration as its run reads it: the pending table, ordered by its numbers, each
    row keyed by the snapshot's key (the user; an audience's (user, audience))."""
    source = Source.model_validate({"table": layout.pending_name, "schema": layout.schema})
    return integration.model_copy(update={
        "source": source, "cursor_column": SEQ, "changes": "cursor", "diff": "off",
        "lookback": None, "null_cursor": "skip", "row_key": layout.ids})


class SnapshotScope(WholeRun):
    """The integration's own run, never moving a cursor; a new run's window is the pending
    table, made then (`prepare`)."""

    moves_cursor = False
    counts_null_cursors = False

    def __init__(self, prepare: Callable[[], None]) -> None:
        self.prepare = prepare

    def new_window(self, plan: RunPlan, engine: Engine, state: StateStore,
                   stored: Cursor | None, now: datetime, before: Any) -> Window:
        self.prepare()
        return Window(start=None, signpost=None)


class SnapshotRun(Run):
    """The loop's run over the pending table (see the module's invariants)."""

    def __init__(self, plan: RunPlan, deps: Deps) -> None:
        integration = plan.integration
        self.model, self.model_spec = integration, plan.spec
        self.layout = layout_for(integration)
        pending = pending_integration(integration, self.layout)
        kind = audience_kind(self.layout) if integration.audience is not None else \
            pending_kind(self.layout, integration.on_leave)
        self.leavers = "users" if integration.audience is None else "memberships"
        pending_plan = RunPlan(pending, kind, source_spec(pending, kind), plan.options,
                               resend_in_doubt=kinds.kind_of(pending).resends_in_doubt(pending))
        super().__init__(pending_plan, deps, SnapshotScope(self.prepare))
        self.stages = Stages([SnapshotStage(integration.name, self.advance)])

    def prepare(self) -> None:
        """The model's result compared with the snapshot, in the warehouse: the pending
        table."""
        with connected(self.deps.engine, self.model_spec) as conn:
            spec, resolved = compared_source(conn, self.model, self.model_spec)
            try:
                compare.ensure_snapshot(conn, self.layout, spec, resolved)
                compare.make_pending(conn, self.layout, spec, resolved, self.model.on_leave)
                conn.commit()
            except sa.exc.SQLAlchemyError as exc:
                raise self._failed("comparing the model with its snapshot", exc) from exc

    def pending(self) -> compare.PendingCounts:
        try:
            with self.deps.engine.connect() as conn:
                return compare.pending_counts(conn, self.layout)
        except sa.exc.SQLAlchemyError as exc:
            raise self._failed("counting the pending users", exc) from exc

    def advance(self) -> None:
        advance(self.deps.state, self.deps.engine, self.layout, self.run_id)

    def _failed(self, doing: str, exc: BaseException) -> SourceError:
        schema = self.layout.schema or "the connection's own schema"
        return SourceError(
            f"integration {self.i.name}: {doing} failed in the warehouse: {first_line(exc)}; "
            f"the snapshot is kept in {schema} (the 'snapshot.schema' key): the warehouse "
            "role needs to create tables there")

    def _check_delete_cap(self, window: Window) -> None:
        """Before any request: a model that returns a user twice, or that would clear or
        delete more users than `max_leaves` allows, stops the run."""
        counts = self.pending()
        if counts.repeated:
            raise SourceError(
                f"integration {self.i.name}: the model returns {counts.repeated} users more "
                "than once; a 'changes: snapshot' model holds one row per user. Nothing was "
                "sent")
        if self.model.on_leave == "keep" or not counts.left:
            return
        cap = leave_cap(self.model.max_leaves, counts.held)
        allowed = max(self.model.max_deletes, self.options.allow_deletes or 0)
        if self.model.on_leave == "delete" and counts.left > allowed:
            raise RunRefused(
                f"integration {self.i.name}: this run would delete {counts.left} users, more "
                f"than max_deletes ({self.model.max_deletes}); nothing was sent. Check the "
                f"model, then raise max_deletes or rerun with --allow-deletes {counts.left}")
        if counts.left > cap:
            verb = "clear" if self.model.on_leave == "clear" else "delete"
            raise ConfigError(
                f"integration {self.i.name}: this run would {verb} {counts.left} "
                f"{self.leavers} that left the model, more than max_leaves allows ({cap}: "
                f"{self.model.max_leaves} of the {counts.held} {self.leavers} in the "
                "snapshot); "
                "nothing was sent. Check the model, then raise 'max_leaves'",
                key="max_leaves")

    def _keep_failed(self, window: Window) -> None:
        """Nothing kept: the next run compares the users of failed requests again."""
