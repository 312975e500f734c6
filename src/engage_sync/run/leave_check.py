"""`on_leave` for an integration with a cursor: after its run, when its `leave_check` is due,
the source's identifiers are read whole (nothing else), compared with the users of the last
check, and the leavers sent as a snapshot run sends its own (`snapshot.kind.pending_kind`
over its pending layout), within the same caps (`snapshot_run.refuse_leavers`).

The leavers go through the loop's own run (journal, settle, resume), a run of the integration
with the scope `leavers`, reading them from a DuckDB file of the run's own.
Invariants: nothing of the source is read when the check is not due and no check is under
way; the leavers are kept in the state (`state.leave_checks.begin`) before the run opens, so
a killed check resumes on the same rows and sends nothing settled twice; a check over its
caps stops before any request, and checks again next run; once its requests are settled,
the field record of each acknowledged leaver is dropped (a user who comes back is sent whole)
and the run counts them (`rows_left`); the users remembered are the source's and the
leavers, so a leaver whose removal failed is found again by the next check.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import sqlalchemy as sa

from engage_sync import kinds
from engage_sync.config.integration import Integration, Warehouse
from engage_sync.cursor.progress import Cursor
from engage_sync.cursor.window import Window
from engage_sync.errors import ConfigError, RunRefused
from engage_sync.kinds.arrow_values import Columns
from engage_sync.kinds.track_rows import references
from engage_sync.read.key_columns import read_keys
from engage_sync.read.plan import RunPlan, source_spec
from engage_sync.run.loop import Deps, Run, run_sync
from engage_sync.run.scope import WholeRun
from engage_sync.run.snapshot_run import pending_integration, refuse_leavers
from engage_sync.run.stage import Stages
from engage_sync.run.windows import Windows
from engage_sync.snapshot import leavers as lv
from engage_sync.snapshot.kind import pending_kind
from engage_sync.snapshot.layout import SEQ, Layout, layout_of
from engage_sync.snapshot.stage import SnapshotStage
from engage_sync.state import leave_checks
from engage_sync.state.field_codec import user_key
from engage_sync.state.snapshot_marks import acknowledged, record_left
from engage_sync.state.store import StateStore

LEAVERS = "leavers"
"""The scope of a leave check's run: apart from the integration's cursor runs."""


def cursor_sync(plan: RunPlan, deps: Deps) -> dict[str, Any]:
    """The cursor run, then the leave check when it is due (or one under way); returns the
    cursor run's record."""
    record = run_sync(plan, deps)
    check(plan, deps)
    return record


def due(plan: RunPlan, state: StateStore, now: datetime) -> bool:
    """Whether a check must run now: one is under way, or `every` passed since the last."""
    name, section = plan.integration.name, plan.integration.leave_check
    assert section is not None
    if state.unfinished_run(name, "incremental", LEAVERS) is not None:
        return True
    last, under_way = leave_checks.last_check(state.engine, name)
    if under_way or last is None:
        return True
    last = last if last.tzinfo is not None else last.replace(tzinfo=now.tzinfo)
    return now - last >= section.every


def check(plan: RunPlan, deps: Deps) -> dict[str, Any] | None:
    """Run the leave check if it is due; the record of its run, or None when it found no
    leaver with anything of ours to remove (then no run is opened)."""
    state, name = deps.state, plan.integration.name
    if plan.options.mode != "incremental" or not due(plan, state, deps.clock()):
        return None
    kept = leave_checks.load(state.engine, name)
    found = None
    if kept.pending is None and state.unfinished_run(name, "incremental", LEAVERS) is None:
        found = find(plan, deps, kept.members)
        if found is None:
            return None
    folder = Path(tempfile.mkdtemp(prefix="engage_leavers_"))
    try:
        return LeaveRun(plan, deps, folder / "leavers.duckdb", found).execute()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def find(plan: RunPlan, deps: Deps, members: pa.Table | None) -> Found | None:
    """The source's identifiers compared with `members`: the leavers over the caps (to be
    refused by a run), or kept (`begin`) for the run; None when none has anything of ours
    to remove (the check is then done)."""
    model, state = plan.integration, deps.state
    layout = layout_of(model)
    now = read_keys(deps.engine, plan.spec, layout.ids)
    held = members.num_rows if members is not None else 0
    left = lv.gone(members, now, layout.ids)
    try:
        refuse_leavers(model, plan.options.allow_deletes, left.num_rows, held, *WORDS)
    except (ConfigError, RunRefused):
        return Found(left.num_rows, held)
    pending = lv.pending_rows(left, layout, _masks(model, state, left), held)
    if pending.num_rows == 0:
        leave_checks.finish(state.engine, model.name, deps.clock(), lv.joined(now, pending))
        return None
    leave_checks.begin(state.engine, model.name, pending, lv.joined(now, pending))
    return Found(0, held)


@dataclass(frozen=True)
class Found:
    refused: int
    """Leavers over the caps (none: the leavers are kept in the state)."""
    held: int


WORDS = ("the source", "found by the last leave check")


def _masks(model: Integration, state: StateStore, left: pa.Table) -> list[list[bool]]:
    """Per leaver, which mapped attributes its field record holds a value of ours for."""
    users = users_of(model, left)
    if not users:
        return []
    names = [a for a in model.mapping.attributes.values()] if model.mapping else []
    state.fold_fields(model.name)
    records = state.field_digests(model.name, [user_key(u) for u in users if u])
    return [lv.set_by_us(records.get(user_key(u)) if u else None, names) for u in users]


def users_of(model: Integration, rows: pa.Table) -> list[str]:
    """The user reference of each row, as the kind's transform makes it ('' if invalid)."""
    if rows.num_rows == 0:
        return []
    refs = references(model, Columns(rows.combine_chunks().to_batches()[0]))
    return [r[2] if not isinstance(r, str) else "" for r in refs]


class LeaveScope(WholeRun):
    """A run of the integration that never moves its cursor; its window is the leavers."""

    moves_cursor = False
    counts_null_cursors = False

    def resume_key(self, options: Any) -> str | None:
        return LEAVERS

    def new_window(self, windows: Windows, state: StateStore, stored: Cursor | None,
                   now: datetime) -> Window:
        return Window(start=None, signpost=None)


class LeaveRun(Run):
    """The loop's run over the leavers (see the module's invariants)."""

    def __init__(self, plan: RunPlan, deps: Deps, path: Path, found: Found | None) -> None:
        self.model, self.found = plan.integration, found
        self.layout = layout_of(plan.integration)
        pending = pending_integration(self.model, self.layout).model_copy(
            update={"warehouse": Warehouse(url=f"duckdb:///{path}")})
        kind = pending_kind(self.layout, self.model.on_leave)
        pending_plan = RunPlan(pending, kind, source_spec(pending, kind), plan.options,
                               resend_in_doubt=kinds.kind_of(pending).resends_in_doubt(pending))
        self.rows = leave_checks.load(deps.state.engine, self.model.name).pending
        if found is not None and found.refused:
            self.rows = None
        _write(path, self.layout, self.rows)
        engine = sa.create_engine(f"duckdb:///{path}", poolclass=sa.pool.NullPool)
        super().__init__(pending_plan, replace(deps, engine=engine), LeaveScope())
        self.stages = Stages([SnapshotStage(self.model.name, self.settle)])

    def _check_delete_cap(self, window: Window) -> None:
        """Before any request: a check over its caps stops; it checks again next run."""
        if self.found is not None and self.found.refused:
            refuse_leavers(self.model, self.options.allow_deletes, self.found.refused,
                           self.found.held, *WORDS)

    def settle(self) -> None:
        """The acknowledged leavers: their field record dropped, counted; the check done.
        A refused check is not done (`stop` runs this too)."""
        if self.found is not None and self.found.refused:
            return
        state, name, rows = self.deps.state, self.model.name, self.rows
        acked: list[int] = []
        if rows is not None and rows.num_rows:
            ranges, rejected = acknowledged(state.engine, self.run_id)
            skipped = {p[0] for p in rejected}
            acked = [k for k, seq in enumerate(rows.column(SEQ).to_pylist())
                     if ranges.contains((seq,)) and seq not in skipped]
            done = rows.take(pa.array(acked, pa.int64()))
            users = users_of(self.model, done)
            leave_checks.forget_users(state.engine, name, [u for u in users if u])
            leave_checks.record_leavers(state.engine, self.run_id, name,
                                        lv.left_rows(self.model, self.layout, done),
                                        lv.REASONS[self.model.on_leave])
        record_left(state.engine, self.run_id, len(acked))
        leave_checks.finish(state.engine, name, self.deps.clock())

    def _keep_failed(self, window: Window) -> None:
        """Nothing kept: the next check finds the leavers of failed requests again."""


def _write(path: Path, layout: Layout, rows: pa.Table | None) -> None:
    """The leavers as the DuckDB table the run reads (empty when none are kept)."""
    if rows is None:
        empty = pa.table({c: pa.array([], pa.string()) for c in layout.ids})
        rows = lv.pending_rows(empty, layout, [], 0)
    con = duckdb.connect(str(path))
    try:
        con.register("engage_rows", rows)
        con.execute(f'CREATE OR REPLACE TABLE "{layout.pending_name}" AS '
                    "SELECT * FROM engage_rows")
    finally:
        con.close()
