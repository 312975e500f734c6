"""The state of partitioned runs: a parent run row (what `engage-sync status` shows) and one run
row per partition (`<integration>#k/N`, scope = the parent's run id), each with its own journal,
progress and lease. Part of `StateStore` (a mixin using only `self.engine`), so `state` stays
the only writer.

Invariants:
- a partition's latest run row says how far it settled (`progress`) and whether it read its
  whole window (any status but `running`);
- a parent's record is the sum of its partitions' (journal counts, data points, requests), so
  it counts every row once, whichever partition run sent it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.config import partition_names
from engage_sync.state.records import RunCounts, summed
from engage_sync.state.row_errors import run_counts
from engage_sync.state.runs import close_run
from engage_sync.state.schema import runs

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

    def partition_runs(self, parent_id: str) -> list[dict[str, Any]]:
        """The run rows of a parent's partitions, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(runs).where(runs.c.scope == parent_id)
                                .order_by(runs.c.sync_start_time, runs.c.seq)).mappings().all()
        return [dict(r) for r in rows]

    def counts_of_partitions(self, parent_id: str) -> tuple[int, int, int, int]:
        """(synced, failed, rejected, in doubt) of a parent's partitions together."""
        total = self._summed_counts(self.partition_runs(parent_id))
        return total.synced, total.failed, total.rejected, total.in_doubt

    def finish_partitioned(self, parent_id: str, job_status: str,
                           message: str | None = None) -> None:
        """Finish a parent run with the sums of its partitions' records."""
        children = self.partition_runs(parent_id)
        totals = {c: sum(int(r.get(c) or 0) for r in children) for c in SUMMED}
        counts = self._summed_counts(children)
        with self.engine.begin() as conn:
            close_run(conn, parent_id, job_status, message, counts, **totals)

    def _summed_counts(self, children: list[dict[str, Any]]) -> RunCounts:
        with self.engine.connect() as conn:
            return summed(run_counts(conn, r["run_id"]) for r in children)
