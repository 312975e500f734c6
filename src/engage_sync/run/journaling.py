"""Which journaling a run's send loop keeps, chosen once from the kind (`Kind.group_commits`,
handed down as `RunContext.group_commits`): the grouped journal for the high-volume
idempotent kind (attributes), the exact journal for every other. The loop's body never asks
again: each mode is its own class."""

from __future__ import annotations

from engage_sync.cursor.progress import Progress
from engage_sync.run.exact_journal import ExactSendLoop
from engage_sync.run.grouped_journal import GroupedSendLoop
from engage_sync.run.send_loop import RunContext, SendLoop


def send_loop_for(ctx: RunContext, progress: Progress) -> SendLoop:
    """The send loop of a run whose kind journals in groups or not (`ctx.group_commits`)."""
    mode: type[SendLoop] = GroupedSendLoop if ctx.group_commits else ExactSendLoop
    return mode(ctx, progress)
