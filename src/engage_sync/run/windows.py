"""The window a new run opens on, and the window a run row was opened on.

A new run reads from the stored cursor (none for a full resync) to the signpost, or a
backfill's range (`cursor.window` owns the rule); a partition reads its parent's window.
Invariant: one run samples its cursor column (for the type of its values) at most once, and
its new window and a resumed backfill's end are aligned to that one sample (`Windows`).
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy.engine import Engine

from engage_sync.cursor.progress import Cursor, decode_cursor, stamp
from engage_sync.cursor.window import Window, align, backfill_window, incremental_window
from engage_sync.read.extract import sample_cursor
from engage_sync.read.plan import RunPlan
from engage_sync.state.store import StateStore


class Windows:
    """The windows of one run of `plan` on the warehouse's `engine`, from one sample of the
    cursor column, read when first needed."""

    def __init__(self, plan: RunPlan, engine: Engine) -> None:
        self.plan, self.engine = plan, engine

    @cached_property
    def sample(self) -> Any:
        """One cursor value, for its Python type (`extract.sample_cursor`)."""
        return sample_cursor(self.engine, self.plan.spec)

    def new(self, state: StateStore, stored: Cursor | None, now: datetime) -> Window:
        """The window of a new run: a backfill's range, or from the stored cursor (none for a
        full resync) to the signpost. With lookback, acks below the re-read period are
        pruned."""
        plan = self.plan
        options, lag = plan.options, plan.integration.settle_lag
        if options.mode == "backfill":
            return backfill_window(options.start, options.end, now, lag, self.sample)
        window = incremental_window(None if options.mode == "full_resync" else stored, now,
                                    lag, plan.lookback, self.sample)
        if window.floor is not None:  # lookback: acks below the re-read period are not needed
            state.prune_acks(plan.name, stamp(window.floor))
        return window

    def before(self) -> Any:
        """A resumed backfill's exclusive end, in the source's cursor type."""
        options = self.plan.options
        end = options.end if options.mode == "backfill" else None
        return None if end is None else align(end, self.sample)


def parent_window(run: dict[str, Any], before: Any) -> Window:
    """The window a run was opened on (its row: start, signpost, floor), whatever its progress."""
    signpost, floor = decode_cursor(run["signpost"]), decode_cursor(run["floor"])
    return Window(start=decode_cursor(run["window_start"]),
                  signpost=signpost[0] if signpost else None,
                  floor=floor[0] if floor else None, before=before)

