"""Which alerts are raised now, and the run figures the alert conditions read.

Part of `StateStore` (a mixin using only `self.engine`). One row of `engage_alerts` per
(integration, condition) raised and not cleared.

Invariant: `raise_alert` inserts only where no row is and `clear_alert` deletes only a row
that is; each says whether it made the change, in one statement, so when a run's end and the
status server's watch see the same change at once only one of them delivers it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from engage_sync.state.schema import alerts, runs


class AlertStates:
    """The StateStore's methods for alert states."""

    engine: Engine

    def raised_alerts(self, integration: str) -> set[str]:
        """The conditions raised for `integration` and not cleared."""
        with self.engine.connect() as conn:
            return set(conn.scalars(sa.select(alerts.c.condition).where(
                alerts.c.integration == integration)))

    def raise_alert(self, integration: str, condition: str, figures: dict[str, Any],
                    at: datetime) -> bool:
        """Mark the alert raised; False when it already was (someone else raised it)."""
        row = {"integration": integration, "condition": condition, "raised_at": at,
               "figures": orjson.dumps(figures, default=str).decode()}
        with self.engine.begin() as conn:
            dialect = conn.dialect.name
            if dialect in ("postgresql", "sqlite"):
                insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)
                stmt = insert(alerts).values(row).on_conflict_do_nothing(
                    index_elements=["integration", "condition"])
                return conn.execute(stmt).rowcount == 1
            try:
                conn.execute(alerts.insert().values(row))
            except IntegrityError:
                return False
            return True

    def clear_alert(self, integration: str, condition: str) -> bool:
        """Mark the alert cleared; False when it was not raised."""
        with self.engine.begin() as conn:
            return conn.execute(alerts.delete().where(
                alerts.c.integration == integration,
                alerts.c.condition == condition)).rowcount == 1

    def finished_runs(self, integration: str, limit: int, *, before_seq: int | None = None,
                      status: str | None = None, mode: str | None = None
                      ) -> list[dict[str, Any]]:
        """The integration's finished runs, newest first (before `before_seq`, of one status
        and mode when given)."""
        where = [runs.c.integration == integration, runs.c.sync_finish_time.is_not(None)]
        where += [] if before_seq is None else [runs.c.seq < before_seq]
        where += [] if status is None else [runs.c.job_status == status]
        where += [] if mode is None else [runs.c.mode == mode]
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs).where(*where).order_by(runs.c.seq.desc())
                                .limit(limit)).mappings().all()
        return [dict(r) for r in rows]

    def success_and_first(self, integration: str) -> tuple[datetime | None, datetime | None]:
        """When the newest successful run finished, and when the first run started."""
        with self.engine.connect() as conn:
            last = conn.scalar(sa.select(sa.func.max(runs.c.sync_finish_time)).where(
                runs.c.integration == integration, runs.c.job_status == "success"))
            first = conn.scalar(sa.select(sa.func.min(runs.c.sync_start_time)).where(
                runs.c.integration == integration))
        return _utc(last), _utc(first)


def _utc(value: datetime | None) -> datetime | None:
    """A stored time as aware UTC (SQLite returns them naive)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
