"""Which stages a run plugs into its loop (`run.stage`): the one place that knows them.

The field diff is a stage when the integration's kind diffs (`Kind.diffs`): every mode diffs
(a backfill or a full resync bills only what differs from the record), unless the run is
told to send whole (`RunOptions.send_whole`), which refreshes the record; the row trace
(`trace: true`, not in dry runs) is the first and last stage; a helper process
is allowed only to a run that owns its process (not a partition on a worker) and records
something (not a dry run).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from engage_sync.diff.helper import helper_after
from engage_sync.diff.stage import diff_stage
from engage_sync.read.plan import RunPlan
from engage_sync.run.stage import Stage, Stages
from engage_sync.run.trace_stage import bind, trace_stages
from engage_sync.state.store import StateStore


def stages_for(plan: RunPlan, state: StateStore, own_process: bool,
               environ: Mapping[str, str] = os.environ) -> Stages:
    """The run's stages; raises ConfigError for a bad ENGAGE_SYNC_FIELD_HELPER_AFTER in
    `environ`, dry runs included (the setting is checked where it is read)."""
    stages: list[Stage] = []
    options = plan.options
    if plan.kind.diffs(plan.integration):
        after = helper_after(environ)
        stages.append(diff_stage(
            plan.name, state, refresh=options.send_whole,
            helper_after=after if own_process and not options.dry_run else None))
    if plan.integration.trace and not options.dry_run:  # first and last: sees the diff's work
        first, last = trace_stages(plan.name, state)
        stages = [first, *stages, last]
    return Stages(stages)


def bind_run(stages: Stages, run_id: str) -> None:
    """Tell the stages that record per run (the row trace) their run's id."""
    bind(stages, run_id)
