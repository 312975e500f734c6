"""Retention of rejected and failed row records: older than an age (default 30 days), pruned.

Run records are kept for ever (they are small and are the sync history the status endpoint
pages through); their counts were fixed when each run finished, so pruning its rows does not
change a finished run's record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from engage_sync.config.durations import parse_duration
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore

log = logging.getLogger("engage_sync.state.retention")

RETENTION_ENV = "ENGAGE_SYNC_ERRORS_RETENTION"
DEFAULT_RETENTION = timedelta(days=30)


def retention(value: str | None = None) -> timedelta:
    """The retention age: `value` (e.g. '30d', '12h'), else the environment, else 30 days.

    Raises ConfigError for an unreadable or non-positive age."""
    text = value if value is not None else os.environ.get(RETENTION_ENV)
    if text is None or text == "":
        return DEFAULT_RETENTION
    try:
        age = parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"retention {text!r}: {exc} (flag --older-than or {RETENTION_ENV})"
                          ) from exc
    if age <= timedelta(0):
        raise ConfigError(f"retention {text!r} must be longer than zero")
    return age


def prune(store: StateStore, age: timedelta | None = None,
          now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> int:
    """Delete rejected / failed / in-doubt row records recorded before now − age; returns how
    many were deleted. Run records are never deleted."""
    age = age if age is not None else retention()
    deleted = store.prune_errors(now() - age)
    store.prune_traces(now() - age)  # row traces (`trace: true`) kept as long
    if deleted:
        log.info("pruned %d row error records older than %s", deleted, age)
    return deleted


def prune_quietly(store: StateStore) -> None:
    """`prune` after a sync, at the default age: a failure is one warning, never the sync's."""
    try:
        prune(store)
    except Exception as exc:
        log.warning("pruning row errors failed: %s", exc)
