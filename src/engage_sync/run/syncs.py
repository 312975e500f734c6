"""Which run a plan makes: by its snapshot (`changes: snapshot`), by its cursor and then its
leave check (`on_leave` with `leave_check`), or by its cursor alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engage_sync.read.plan import RunPlan
from engage_sync.run.leave_check import cursor_sync
from engage_sync.run.loop import Deps, run_sync
from engage_sync.run.snapshot_run import snapshot_sync

Sync = Callable[[RunPlan, Deps], dict[str, Any]]


def sync_of(plan: RunPlan) -> Sync:
    """How a run of this plan is made."""
    if plan.integration.changes == "snapshot":
        return snapshot_sync
    if plan.integration.leave_check is not None:
        return cursor_sync
    return run_sync
