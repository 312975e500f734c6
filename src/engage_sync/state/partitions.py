"""The state of partitioned runs: a parent run row (what `engage-sync status` shows) and one run
row per partition (`<integration>#k/N`, scope = the parent's run id), each with its own journal,
progress and lease. Part of `StateStore` (a mixin), so `state` stays the only writer.

Invariants:
- a partition's latest run row says how far it settled (`progress`) and whether it read its
  whole window (any status but `running`);
- a parent's record is the sum of its partitions' (journal counts, data points, requests), so
  it counts every row once, whichever partition run sent it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from engage_sync.config import partition_names
from engage_sync.state.schema import runs

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from engage_sync.state.store import RunCounts

SUMMED = ("rows_unchanged", "data_points_sent", "data_points_saved", "requests_sent")
"""Run columns a parent sums from its partitions' rows (the journal holds the others)."""


def own_runs(integration: str) -> sa.ColumnElement[bool]:
    """The runs of an integration and of its partitions (`<integration>#k/N`)."""
    return sa.or_(runs.c.integration == integration,
                  runs.c.integration.startswith(partition_names.family_prefix(integration),
                                                autoescape=True))


class PartitionRuns:
    """The StateStore's methods for partitioned runs."""

    engine: Engine

    def counts(self, run_id: str) -> RunCounts:  # (StateStore's)
        raise NotImplementedError

    def release_lease(self, run_id: str, owner: str, message: str | None = None) -> None:
        """Give up a run's lease without finishing it (it stopped on an error and is to be
        resumed): the next start takes it over at once. Says why in its message."""
        values: dict[str, Any] = {"lease_until": datetime.now(UTC)}
        if message is not None:
            values["message"] = message
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id, runs.c.owner == owner)
                         .values(**values))

    def has_run(self, run_id: str) -> bool:
        with self.engine.connect() as conn:
            return conn.scalar(sa.select(runs.c.run_id).where(runs.c.run_id == run_id)) \
                is not None

    def partition_runs(self, parent_id: str) -> list[dict[str, Any]]:
        """The run rows of a parent's partitions, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs).where(runs.c.scope == parent_id)
                                .order_by(runs.c.sync_start_time, runs.c.seq)).mappings().all()
        return [dict(r) for r in rows]

    def counts_of_partitions(self, parent_id: str) -> tuple[int, int, int, int]:
        """(synced, failed, rejected, in doubt) of a parent's partitions together."""
        counts = [self.counts(r["run_id"]) for r in self.partition_runs(parent_id)]
        return (sum(c.synced for c in counts), sum(c.failed for c in counts),
                sum(c.rejected for c in counts), sum(c.in_doubt for c in counts))

    def finish_partitioned(self, parent_id: str, job_status: str,
                           message: str | None = None) -> None:
        """Finish a parent run with the sums of its partitions' records."""
        children = self.partition_runs(parent_id)
        totals = {c: sum(int(r.get(c) or 0) for r in children) for c in SUMMED}
        counts = [self.counts(r["run_id"]) for r in children]
        with self.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == parent_id).values(
                job_status=job_status, sync_finish_time=datetime.now(UTC), message=message,
                rows_synced=sum(c.synced for c in counts),
                rows_failed_with_errors=sum(c.failed for c in counts),
                rows_in_doubt=sum(c.in_doubt for c in counts),
                rows_rejected=sum(c.rejected for c in counts),
                errors_unmapped=sum(c.unmapped for c in counts),
                rows_possibly_duplicated=sum(c.duplicated for c in counts), **totals))
