"""A dry run: read, validate and pack the next window, sending and recording nothing.

Invariants: nothing is written to the service or to the run history; the only write is the
field diff's fold of what a killed run logged (where things are recorded, not what).
`data_points_sent` predicts what the service bills for the window as it is read now: each
attribute key the diff would send (superseded rows none), each event and each purchase;
rows the service would refuse one by one are the only thing it cannot see. `rows_read` is
what the run's record would count as read: rows to send, rejects and rows unchanged (the
diff's and superseded ones), never the rows a backfill drops as sent before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy.engine import Engine

from engage_sync.items import Item, Unchanged
from engage_sync.read.plan import RunPlan
from engage_sync.run.loop import Deps, Run
from engage_sync.run.scope import WholeRun
from engage_sync.snapshot.predict import predict
from engage_sync.state.store import StateStore


@dataclass
class DryRun:
    rows: int = 0
    requests: int = 0
    rejects: list[tuple[str, str]] = field(default_factory=list)
    sample: list[bytes] = field(default_factory=list)
    unchanged: int = 0
    points: int = 0
    saved: int = 0
    users: dict[str, Any] | None = None
    """A snapshot run's users by change (new, changed, left) and whether it would stop."""

    @property
    def rows_read(self) -> int:
        """Rows the run would read and count: to send, rejected, or unchanged."""
        return self.rows + self.unchanged

    def add(self, outcome: Item | tuple[str, str], packer: Any, sample_size: int) -> None:
        """One row read: a reject listed, or an item counted, sampled and packed."""
        self.rows += 1
        if not isinstance(outcome, Item):
            self.rejects.append(outcome)
            return
        self.points += outcome.points
        if len(self.sample) < sample_size:
            self.sample.append(outcome.blob)
        if packer.add(outcome) is not None:
            self.requests += 1

    def summary(self, integration: str) -> dict[str, Any]:
        """What the run would send, after the field-level diff: counts (rows to send, rows
        read, rows unchanged, data points to send and saved), the first 100 rejects (keys and
        reasons) and a sample of objects (for an irreversible kind: every object it would
        send)."""
        return {"integration": integration, "dry_run": True, "rows": self.rows,
                "rows_read": self.rows_read, "rows_unchanged": self.unchanged,
                "requests": self.requests,
                "data_points_sent": self.points, "data_points_saved": self.saved,
                "rejects": [list(r) for r in self.rejects[:100]],
                "sample": [b.decode() for b in self.sample],
                **({"users": self.users} if self.users is not None else {})}


def dry_run(plan: RunPlan, engine: Engine, state: StateStore,
            clock: Callable[[], datetime] = lambda: datetime.now(UTC),
            sample_size: int = 3) -> DryRun:
    """Read, validate and batch the next window of `plan` without sending or recording
    anything. An irreversible kind (deletes) lists every object it would send (`sample`), not
    a sample. A snapshot model is counted by the warehouse, nothing made."""
    if plan.integration.changes == "snapshot":
        p = predict(plan, engine)
        return DryRun(rows=p.new + p.changed + p.left, requests=p.requests, points=p.points,
                      users={"new": p.new, "changed": p.changed, "left": p.left,
                             "in_snapshot": p.held, "stops": p.refusal})
    if plan.kind.irreversible:
        sample_size = sys.maxsize
    with httpx.HTTPTransport() as transport:  # never used: nothing is sent
        run = Run(plan, Deps(engine=engine, state=state, transport=transport, api_key="",
                             clock=clock), WholeRun())
        packer = plan.kind.packer(plan.integration)
        result = DryRun()
        run.stages.open()  # the diff folds a killed run's log: where, not what, is recorded
        try:
            for rows in run.reader.batches(run.new_window()):
                run.stages.batch(rows.outcomes)
                for outcome in rows.outcomes:
                    if outcome is not None and not isinstance(outcome, Unchanged):
                        result.add(outcome, packer, sample_size)
                result.unchanged += rows.superseded
                result.saved += rows.superseded_points
            if packer.flush() is not None:
                result.requests += 1
            unchanged, saved = run.stages.take_counts()
            result.unchanged += unchanged
            result.saved += saved
        finally:
            run.stages.stop()
    return result
