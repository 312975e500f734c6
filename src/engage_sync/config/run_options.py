"""How to run: the options a CLI command, a flow's parameters or a backfill chunk give a run.

Invariant: a `RunOptions` is valid once built by `run_options` (naive datetimes are UTC, a
range only for a backfill, start before end, partitions at least 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from engage_sync.cursor.progress import Mode, RunMode, encode_cursor
from engage_sync.errors import ConfigError


@dataclass(frozen=True)
class RunOptions:
    """How to run. A backfill reads rows with start <= cursor < end, sends them with the bulk
    header, never moves the incremental cursor, and skips events and purchases that an
    incremental run already sent, unless `resend_events`."""

    mode: RunMode = "incremental"
    dry_run: bool = False
    start: datetime | None = None
    end: datetime | None = None
    resend_events: bool = False
    allow_deletes: int | None = None
    partitions: int | None = None
    """Split the run into this many partitions (None: the integration's `partitions`)."""
    send_whole: bool = False
    """Send every attribute object read whole, without the field diff (when the service's
    profiles are known to have drifted from the record); the record is refreshed."""
    accept_schema: bool = False
    """Accept a changed type of a mapped column or payload key (`run.schema_guard`)."""
    allow_points: int | None = None
    """Let this run bill up to this many data points, above the caps (`run.spend_cap`)."""

    @property
    def scope(self) -> str | None:
        """What makes a backfill run resumable: its range."""
        if self.mode != "backfill":
            return None
        return encode_cursor([self.start, self.end])


def run_options(mode: Mode, start: datetime | None, end: datetime | None, dry_run: bool,
                resend_events: bool, allow_deletes: int | None = None,
                partitions: int | None = None, send_whole: bool = False,
                accept_schema: bool = False, allow_points: int | None = None) -> RunOptions:
    """Parameters (CLI, flow, backfill) → RunOptions. Naive datetimes are UTC. Raises
    ConfigError when start or end is given outside a backfill, or start is not before end."""
    start, end = as_utc(start), as_utc(end)
    if (start or end) and mode != "backfill":
        raise ConfigError(f"start and end apply to mode 'backfill' only, not '{mode}'")
    if start and end and start >= end:
        raise ConfigError(f"start {start.isoformat()} is not before end {end.isoformat()}")
    if partitions is not None and partitions < 1:
        raise ConfigError(f"partitions must be at least 1, not {partitions}", key="partitions")
    return RunOptions(mode=mode, dry_run=dry_run, start=start, end=end,
                      resend_events=resend_events, allow_deletes=allow_deletes,
                      partitions=partitions, send_whole=send_whole,
                      accept_schema=accept_schema, allow_points=allow_points)


def as_utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


