"""One row's traced runs as `engage-sync trace` and the status server's trace endpoint show
them: both call `traced` and `as_json`, so the two answers cannot drift apart.

Invariant: only what `state/traces.py` keeps (names, outcomes, reasons, request numbers) and
the run's own fields; never a value of the row. Runs recorded before the retention window
(`state/retention.py`) are left out even when their traces are not pruned yet.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from engage_sync.state import retention
from engage_sync.state.store import StateStore


def traced(store: StateStore, integration: str, row_key: str,
           now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> list[dict[str, Any]]:
    """Every traced run of `integration` within the retention window that read `row_key`,
    oldest first (`StateStore.trace`); its start time in UTC."""
    since = now() - retention.retention()
    rows = []
    for r in store.trace(integration, row_key):
        r["sync_start_time"] = utc(r["sync_start_time"])
        if r["sync_start_time"] >= since:
            rows.append(r)
    return rows


def as_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with plain text keys and their times as ISO 8601 text, for any JSON encoder."""
    return [{str(k): v.isoformat() if isinstance(v, datetime) else v for k, v in r.items()}
            for r in rows]


def utc(at: datetime) -> datetime:
    """An aware UTC time (a naive time from the state database is UTC)."""
    return at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)
