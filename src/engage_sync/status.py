"""Sync status records in the shape of the service's `job_sync_status` output, and their pages.

A record holds exactly the service's fields (job_status, sync_start_time, sync_finish_time,
last_timestamp_synced, rows_synced, rows_failed_with_errors) plus engage-sync's own counts
(rows_read, rows_rejected, rows_in_doubt). Pages hold 10 records, newest first; the cursor is
the run sequence number of the first record of a page, base64-encoded, so pages stay stable while
new runs are added.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engage_sync.state import StateStore

PAGE_SIZE = 10
JOB_STATUSES = ("running", "success", "partial", "error", "config_error")


class InvalidCursor(ValueError):
    """The `cursor` of a status page request is not one this store handed out."""


def job_status(synced: int, failed: int, rejected: int, in_doubt: int) -> str:
    """success: all rows synced; partial: some rows failed, were rejected or are in doubt;
    error: rows were read and none synced."""
    troubled = failed + rejected + in_doubt
    if troubled == 0:
        return "success"
    return "partial" if synced > 0 else "error"


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def record(run: dict[str, Any], *, extended: bool = True) -> dict[str, Any]:
    """A run row → a status record (the service's six fields, then engage-sync's counts)."""
    failed = int(run["rows_failed_with_errors"]) + int(run["rows_rejected"])
    rec: dict[str, Any] = {
        "job_status": run["job_status"],
        "sync_start_time": _iso(run["sync_start_time"]),
        "sync_finish_time": _iso(run["sync_finish_time"]),
        "last_timestamp_synced": run["last_timestamp_synced"],
        "rows_synced": int(run["rows_synced"]),
        "rows_failed_with_errors": failed,
    }
    if extended:
        rec["rows_read"] = (int(run["rows_synced"]) + failed + int(run["rows_in_doubt"]))
        rec["rows_rejected"] = int(run["rows_rejected"])
        rec["rows_in_doubt"] = int(run["rows_in_doubt"])
        rec["mode"] = run["mode"]
        if run.get("message"):
            rec["message"] = run["message"]
    return rec


def encode_page_cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"r{position}".encode()).decode().rstrip("=")


def decode_page_cursor(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursor(cursor) from exc
    if not text.startswith("r") or not text[1:].isdigit():
        raise InvalidCursor(cursor)
    return int(text[1:])


@dataclass(frozen=True, slots=True)
class StatusPage:
    results: list[dict[str, Any]]
    prev_cursor: str | None
    next_cursor: str | None

    def body(self) -> dict[str, Any]:
        return {"results": self.results, "message": "success"}

    def link_header(self, base_url: str) -> str | None:
        """`Link` with rel="prev" / rel="next"; None when neither applies."""
        links = []
        if self.prev_cursor:
            links.append(f'<{base_url}?cursor={self.prev_cursor}>; rel="prev"')
        if self.next_cursor:
            links.append(f'<{base_url}?cursor={self.next_cursor}>; rel="next"')
        return ", ".join(links) or None


def page(store: StateStore, integration: str, cursor: str | None,
         *, extended: bool = True) -> StatusPage:
    """One page of 10 records, newest first. The Link rules of the service: no links when 10 or
    fewer records exist; no prev on a call without cursor; no next on the last page."""
    total = store.count_runs(integration)
    offset = 0
    if cursor is not None:
        offset = decode_page_cursor(cursor)
        if offset < 0 or offset >= max(total, 1) or offset % PAGE_SIZE:
            raise InvalidCursor(cursor)
    rows = store.runs_newest_first(integration, offset, PAGE_SIZE)
    results = [record(r, extended=extended) for r in rows]
    if total <= PAGE_SIZE:
        return StatusPage(results, None, None)
    prev_cursor = (
        encode_page_cursor(offset - PAGE_SIZE) if cursor is not None and offset > 0 else None
    )
    next_cursor = (
        encode_page_cursor(offset + PAGE_SIZE) if offset + PAGE_SIZE < total else None
    )
    return StatusPage(results, prev_cursor, next_cursor)
