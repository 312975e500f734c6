"""One partition of a partitioned run, as the loop's scope (`run.scope.Scope`).

Partition k of N of the parent run `parent` (a run id) is a run of its own on the parent's
window, reading the rows whose user key hashes to k: a run row named `<integration>#k/N`
(`config.partition_names`) resumed by its parent's id, its own journal, progress and lease.

Invariants:
- it never moves the integration cursor (the coordinator does, `partitions.coordinator`);
- a SyncError leaves it resumable (its unsent entries forgotten, its lease given up), so the
  parent's next start resumes exactly what it had not settled;
- a partition that finished is never run again (Dask recomputes the lost results of a dead
  worker, which would otherwise send a finished partition's rows a second time).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from engage_sync.config import partition_names
from engage_sync.config.run_options import RunOptions
from engage_sync.cursor.progress import Cursor
from engage_sync.cursor.window import Window
from engage_sync.errors import SyncError
from engage_sync.run.windows import Windows, parent_window
from engage_sync.state.store import StateStore


@dataclass(frozen=True)
class PartitionScope:
    """Partition `index` of `count` of the partitioned run `parent` (a run id)."""

    parent: str
    index: int
    count: int
    moves_cursor = False
    counts_null_cursors = False  # the parent counts them once
    own_process = False  # may run on a Dask worker
    resumes_after_error = True
    tries = 0
    only_keys: frozenset[str] | None = None

    @property
    def siblings(self) -> str | None:
        return self.parent

    def run_name(self, integration: str) -> str:
        return partition_names.run_name(integration, self.index, self.count)

    def resume_key(self, options: RunOptions) -> str | None:
        return self.parent

    def finished(self, state: StateStore, run_name: str) -> dict[str, Any] | None:
        done = [r for r in state.partition_runs(self.parent)
                if r["integration"] == run_name and r["job_status"] != "running"]
        return done[-1] if done else None

    def new_window(self, windows: Windows, state: StateStore, stored: Cursor | None,
                   now: datetime) -> Window:
        return parent_window(state.run(self.parent), windows.before())

    def narrow(self, window: Window) -> Window:
        return replace(window, partition=(self.index, self.count))

    def failed(self, state: StateStore, run_id: str, owner: str, integration: str,
               error: SyncError) -> None:
        state.drop_pending(run_id, integration)  # never sent (the send loop settled the rest)
        state.release_lease(run_id, owner, message=str(error))
