"""The window a new run opens on, and the window a run row was opened on.

A new run reads from the stored cursor (none for a full resync) to the signpost, or a
backfill's range (`cursor.window` owns the rule); a partition reads its parent's window.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from engage_sync.cursor.progress import Cursor, decode_cursor, stamp
from engage_sync.cursor.window import Window, align, backfill_window, incremental_window
from engage_sync.read.extract import sample_cursor
from engage_sync.read.plan import RunPlan
from engage_sync.state.store import StateStore


def new_window(plan: RunPlan, engine: Engine, state: StateStore, stored: Cursor | None,
               now: datetime) -> Window:
    """The window of a new run: a backfill's range, or from the stored cursor (none for a full
    resync) to the signpost. With lookback, acks below the re-read period are pruned."""
    options, lag = plan.options, plan.integration.settle_lag
    sample = sample_cursor(engine, plan.spec)
    if options.mode == "backfill":
        return backfill_window(options.start, options.end, now, lag, sample)
    window = incremental_window(None if options.mode == "full_resync" else stored, now, lag,
                                plan.lookback, sample)
    if window.floor is not None:  # lookback: acks below the re-read period are not needed
        state.prune_acks(plan.name, stamp(window.floor))
    return window


def window_before(plan: RunPlan, engine: Engine) -> Any:
    """A resumed backfill's exclusive end, in the source's cursor type."""
    end = plan.options.end if plan.options.mode == "backfill" else None
    if end is None:
        return None
    return align(end, sample_cursor(engine, plan.spec))


def parent_window(run: dict[str, Any], before: Any) -> Window:
    """The window a run was opened on (its row: start, signpost, floor), whatever its progress."""
    signpost, floor = decode_cursor(run["signpost"]), decode_cursor(run["floor"])
    return Window(start=decode_cursor(run["window_start"]),
                  signpost=signpost[0] if signpost else None,
                  floor=floor[0] if floor else None, before=before)

