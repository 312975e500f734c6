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

from engage_sync import kinds
from engage_sync.config.integration import Integration, Source
from engage_sync.config.snapshot import leave_cap
from engage_sync.cursor.progress import Cursor
from engage_sync.cursor.window import Window
from engage_sync.errors import ConfigError, RunRefused, SourceError
from engage_sync.read.duckdb_memory import give_back
from engage_sync.read.extract import connected, first_line
from engage_sync.read.plan import RunPlan, source_spec
from engage_sync.run.loop import Deps, Run
from engage_sync.run.scope import WholeRun
from engage_sync.run.stage import Stages
from engage_sync.run.windows import Windows
from engage_sync.snapshot import compare, left_rows, pending_table
from engage_sync.snapshot.advance import advance
from engage_sync.snapshot.audience import audience_kind, compared_source, layout_for
from engage_sync.snapshot.kind import pending_kind
from engage_sync.snapshot.layout import SEQ, Layout
from engage_sync.snapshot.stage import SnapshotStage
from engage_sync.state.store import StateStore


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

    def new_window(self, windows: Windows, state: StateStore, stored: Cursor | None,
                   now: datetime) -> Window:
        self.prepare()
        return Window(start=None, signpost=None)


def refuse_leavers(model: Integration, allow_deletes: int | None, left: int, held: int,
                   source: str = "the model", among: str = "in the snapshot",
                   noun: str = "users") -> None:
    """Before any request: more leavers to delete than `max_deletes` (RunRefused), or to
    clear or delete than `max_leaves` allows of `held` (ConfigError, both figures); `noun`:
    what leaves (users; an audience's memberships)."""
    if model.on_leave == "keep" or not left:
        return
    cap = leave_cap(model.max_leaves, held)
    allowed = max(model.max_deletes, allow_deletes or 0)
    if model.on_leave == "delete" and left > allowed:
        raise RunRefused(
            f"integration {model.name}: this run would delete {left} users, more "
            f"than max_deletes ({model.max_deletes}); nothing was sent. Check {source}, then "
            f"raise max_deletes or rerun with --allow-deletes {left}")
    if left > cap:
        verb = "clear" if model.on_leave == "clear" else "delete"
        raise ConfigError(
            f"integration {model.name}: this run would {verb} {left} {noun} that left "
            f"{source}, more than max_leaves allows ({cap}: {model.max_leaves} of the {held} "
            f"{noun} {among}); nothing was sent. Check {source}, then raise 'max_leaves'",
            key="max_leaves")


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
                pending_table.make_pending(conn, self.layout, spec, resolved, self.model.on_leave)
                conn.commit()
                give_back(conn)  # what the comparison's joins left, before the run reads
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
        if self.model.audience is None:  # an audience's leavers are memberships, not rows
            left_rows.record(self.deps.state, self.deps.engine, self.model, self.layout,
                             self.run_id)

    def _failed(self, doing: str, exc: BaseException) -> SourceError:
        said = first_line(exc)
        return SourceError(f"integration {self.i.name}: {doing} failed in the warehouse: "
                           f"{said}; {warehouse_fix(said, self.layout.schema)}")

    def _check_delete_cap(self, window: Window) -> None:
        """Before any request: a model that returns a user twice, or that would clear or
        delete more users than `max_leaves` allows, stops the run."""
        counts = self.pending()
        if counts.repeated:
            raise SourceError(
                f"integration {self.i.name}: the model returns {counts.repeated} users more "
                "than once; a 'changes: snapshot' model holds one row per user. Nothing was "
                "sent")
        refuse_leavers(self.model, self.options.allow_deletes, counts.left, counts.held,
                       noun=self.leavers)

    def _keep_failed(self, window: Window) -> None:
        """Nothing kept: the next run compares the users of failed requests again."""


def warehouse_fix(said: str, schema: str | None) -> str:
    """What to do about the warehouse's failure `said` while comparing or advancing."""
    if "out of memory" in said.lower():
        return ("give the warehouse more memory (for DuckDB, ?memory_limit=... in "
                "warehouse.url) or room to spill to")
    where = schema or "the connection's own schema"
    return (f"the snapshot is kept in {where} (the 'snapshot.schema' key): the warehouse "
            "role needs to create tables there")
