"""A snapshot run's dry run: what the next run would send, counted by the warehouse.

Invariants: nothing is written, not even the pending table a killed run may still need (the
comparison is a query here, never a table); before any run (no snapshot table yet) the model
is compared with an empty snapshot; the points are those the run would bill (attributes sent,
removals included; a delete bills none).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.config.snapshot import leave_cap
from engage_sync.errors import SourceError
from engage_sync.read.extract import connected, first_line
from engage_sync.read.plan import RunPlan
from engage_sync.snapshot.audience import compared_source, layout_for
from engage_sync.snapshot.compare import empty_snapshot, pending_select
from engage_sync.snapshot.layout import CHANGE, CHANGED, LEFT, NEW

DELETES_A_REQUEST = 50


@dataclass(frozen=True)
class Prediction:
    new: int
    changed: int
    left: int
    held: int
    points: int
    requests: int
    refusal: str | None
    """Why the run would stop before any request (`max_leaves`), or None."""


def predict(plan: RunPlan, engine: Engine) -> Prediction:
    """What a snapshot run of `plan` would send, counted by the warehouse, nothing made."""
    integration, spec = plan.integration, plan.spec
    layout = layout_for(integration)
    on_leave = integration.on_leave
    try:
        with connected(engine, spec) as conn:
            spec, resolved = compared_source(conn, integration, spec)
            held_table = sa.inspect(conn).has_table(layout.snapshot_name, schema=layout.schema)
            snapshot = layout.snapshot() if held_table else \
                empty_snapshot(layout, spec, resolved).subquery("engage_none")
            pending = pending_select(layout, spec, resolved, on_leave, snapshot).subquery("p")
            points = sa.func.coalesce(sa.func.sum(sum(
                (sa.case((pending.c[a.send], 1), else_=0) for a in layout.attributes),
                sa.literal(0))), 0)
            by = {str(c): (int(n), int(p)) for c, n, p in conn.execute(
                sa.select(pending.c[CHANGE], sa.func.count(), points).group_by(
                    pending.c[CHANGE]))}
            held = int(conn.execute(sa.select(sa.func.count()).select_from(
                layout.snapshot())).scalar_one()) if held_table else 0
    except sa.exc.SQLAlchemyError as exc:
        raise SourceError(f"integration {integration.name}: comparing the model with its "
                          f"snapshot failed: {first_line(exc)}") from exc
    new, changed, left = (by.get(k, (0, 0)) for k in (NEW, CHANGED, LEFT))
    objects = new[0] + changed[0] + (left[0] if on_leave == "clear" else 0)
    deletes = left[0] if on_leave == "delete" else 0
    limit = integration.service.limits.objects_per_request
    cap = leave_cap(integration.max_leaves, held)
    refusal = (f"the run would stop: {left[0]} users left, more than max_leaves allows "
               f"({cap}: {integration.max_leaves} of the {held} users in the snapshot)"
               if on_leave != "keep" and left[0] > cap else None)
    return Prediction(new[0], changed[0], left[0], held,
                      new[1] + changed[1] + (left[1] if on_leave == "clear" else 0),
                      -(-objects // limit) + -(-deletes // DELETES_A_REQUEST), refusal)
