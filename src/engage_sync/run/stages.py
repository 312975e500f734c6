"""Which stages a run plugs into its loop (`run.stage`): the one place that knows them.

The field diff is a stage when the integration's kind diffs (`Kind.diffs`): a full resync
and a backfill refresh the record; a helper process is allowed only to a run that owns its
process (not a partition on a worker) and records something (not a dry run).
"""

from __future__ import annotations

from engage_sync.config.integration import Integration
from engage_sync.diff.stage import diff_stage
from engage_sync.kinds import Kind
from engage_sync.run.options import RunOptions
from engage_sync.run.stage import Stage, Stages
from engage_sync.state.store import StateStore


def stages_for(integration: Integration, kind: Kind, state: StateStore, options: RunOptions,
               own_process: bool, helper_after: int | None) -> Stages:
    stages: list[Stage] = []
    if kind.diffs(integration):
        stages.append(diff_stage(
            integration.name, state, refresh=options.mode != "incremental",
            helper_after=helper_after if own_process and not options.dry_run else None))
    return Stages(stages)
