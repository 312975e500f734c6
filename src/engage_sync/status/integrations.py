"""The integrations of a config folder as the service lists its own (`GET /cdi/integrations`).

Each integration file is one entry, named by its file's stem, with the service's keys:
integration_id and integration_name (the stem), integration_type (the kind),
integration_status (`active`, or `config_error` for a file that does not load), warehouse_type
(the URL's dialect, nothing else of it), and from its newest run record last_job_start_time,
last_job_status and last_updated_at (the last timestamp synced). Keys the service has and
engage-sync has no value for (app_group_id, contact_emails, next_scheduled_run) are null.

Pages hold 10 entries sorted by id; a cursor names the first id of its page, so a page stays the
same when files are added or removed before it. Link rules as job_sync_status (`record.page`).
"""

from __future__ import annotations

import base64
import binascii
import bisect
from pathlib import Path
from typing import Any

from engage_sync.config.files import integration_files, load_integration
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore
from engage_sync.status.record import PAGE_SIZE, InvalidCursor, StatusPage, record

UNSET = ("app_group_id", "contact_emails", "next_scheduled_run")


def encode_cursor(name: str) -> str:
    return base64.urlsafe_b64encode(f"i{name}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The integration id a cursor names; InvalidCursor for anything `encode_cursor` did not
    make."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursor(cursor) from exc
    if not text.startswith("i") or len(text) < 2 or len(text) > 101:
        raise InvalidCursor(cursor)
    return text[1:]


def page_of(names: list[str], cursor: str | None) -> tuple[list[str], str | None, str | None]:
    """(the names of the page, prev cursor, next cursor) over sorted `names` (pure): no links
    when there are 10 or fewer; no prev without a cursor; no next on the last page."""
    start = 0 if cursor is None else bisect.bisect_left(names, decode_cursor(cursor))
    shown = names[start:start + PAGE_SIZE]
    if len(names) <= PAGE_SIZE:
        return shown, None, None
    after = start + PAGE_SIZE
    next_cursor = encode_cursor(names[after]) if after < len(names) else None
    prev_cursor = None
    if cursor is not None and start > 0:
        prev_cursor = encode_cursor(names[max(0, start - PAGE_SIZE)])
    return shown, prev_cursor, next_cursor


def entry(store: StateStore, path: Path) -> dict[str, Any]:
    """One integration file as the service lists an integration."""
    name = path.stem
    try:
        integration = load_integration(path)
        kind, status = integration.kind, "active"
        url = integration.warehouse.url
        warehouse = url.split("://", 1)[0].split("+", 1)[0] if "://" in url else None
    except ConfigError:
        kind, status, warehouse = None, "config_error", None
    seqs = store.run_seqs(name, limit=1)
    last = record(store.runs_by_seq(name, seqs)[0], extended=False) if seqs else {}
    return {
        "integration_id": name, "integration_name": name, "integration_type": kind,
        "integration_status": status, "warehouse_type": warehouse,
        "last_updated_at": last.get("last_timestamp_synced"),
        "last_job_start_time": last.get("sync_start_time"),
        "last_job_status": last.get("job_status"),
        **dict.fromkeys(UNSET),
    }


def files_by_id(folder: str | Path) -> dict[str, Path]:
    """The folder's integration files by id (a `.yaml` wins over a `.yml` of the same stem)."""
    found: dict[str, Path] = {}
    for path in integration_files(folder):
        found.setdefault(path.stem, path)
    return found


def integrations_page(store: StateStore, folder: str | Path, cursor: str | None) -> StatusPage:
    """One page of the folder's integrations. Raises InvalidCursor."""
    files = files_by_id(folder)
    shown, prev_cursor, next_cursor = page_of(sorted(files), cursor)
    return StatusPage([entry(store, files[name]) for name in shown], prev_cursor, next_cursor)
