"""Sync status records in the shape of the service's `job_sync_status` output, and their pages.

A record holds the service's fields (job_status, sync_start_time, sync_finish_time,
last_timestamp_synced, rows_synced, rows_failed_with_errors) and the billed data points
(data_points_sent: those of the objects the service acknowledged; data_points_saved: those the
field-level diff left out; additive keys, so a reader of the service's records still reads
ours), plus, when extended, engage-sync's own counts (rows_read, rows_rejected, rows_in_doubt,
rows_unchanged: read and not sent because nothing in them changed, rows_skipped_null_cursor,
errors_unmapped, rows_possibly_duplicated, mode, run_id, message).
Pages hold 10 records, newest first; the cursor is the run sequence number of the first record
of a page, base64-encoded, so pages stay stable while new runs are added. Reads the state
tables directly (the status part may use SQLAlchemy); never decides control flow.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engage_sync.state.store import StateStore

PAGE_SIZE = 10


class InvalidCursor(ValueError):
    """The `cursor` of a status page request is not one this store handed out."""


def job_status(synced: int, failed: int, rejected: int, in_doubt: int,
               unchanged: int = 0) -> str:
    """success: all rows synced (or found unchanged: the service holds them already);
    partial: some rows failed, were rejected or are in doubt; error: rows were read and none
    synced nor found unchanged."""
    troubled = failed + rejected + in_doubt
    if troubled == 0:
        return "success"
    return "partial" if synced + unchanged > 0 else "error"


def job_message(integration: str, synced: int, failed: int, rejected: int,
                in_doubt: int, unchanged: int = 0) -> str | None:
    """What a run that synced none of the rows it read says about it and what to do; None for
    every other run (their counts speak for themselves)."""
    if job_status(synced, failed, rejected, in_doubt, unchanged) != "error":
        return None
    read = failed + rejected + in_doubt
    listing = f"`engage-sync errors {integration}` lists every row with its reason"
    if rejected == read:
        return (f"all {read} rows read were rejected before sending; {listing}: fix those rows "
                "in the source (or the integration's mapping) and they are read again when "
                "their UPDATED_AT changes")
    if in_doubt == read:
        return (f"all {read} rows read are in doubt: the service never confirmed their "
                "requests (timeouts, 5xx, dropped connections), so they may or may not have "
                f"arrived; check the service and the run logs; {listing}")
    if failed == read:
        return f"the service refused all {read} rows read; {listing}"
    return (f"none of the {read} rows read was synced: {rejected} rejected, {failed} refused "
            f"by the service, {in_doubt} in doubt; {listing}")


def _iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC to the millisecond: a client that triggers a sync and then waits for a
    record started at or after its own clock's time (airflow-provider-braze) must not miss a
    run started within the same second."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def failed_rows(run: Mapping[str, Any]) -> int:
    """The one definition of a run's failed rows (`rows_failed_with_errors`), as the service's
    job_sync_status counts them: rejected before sending, refused by the service, or failed
    after their request's retries. A run row keeps the rejects apart (`rows_rejected`), so this
    adds them; `run` is a run row or a sum of run rows (`RunRows.run_totals`)."""
    return int(run["rows_failed_with_errors"] or 0) + int(run["rows_rejected"] or 0)


def record(run: dict[str, Any], *, extended: bool = True) -> dict[str, Any]:
    """A run row → a status record (the service's six fields, then engage-sync's counts)."""
    failed = failed_rows(run)
    rec: dict[str, Any] = {
        "job_status": run["job_status"],
        "sync_start_time": _iso(run["sync_start_time"]),
        "sync_finish_time": _iso(run["sync_finish_time"]),
        "last_timestamp_synced": run["last_timestamp_synced"],
        "rows_synced": int(run["rows_synced"]),
        "rows_failed_with_errors": failed,
        # billed data points: what the service bills for this run, and what the diff saved
        "data_points_sent": int(run.get("data_points_sent") or 0),
        "data_points_saved": int(run.get("data_points_saved") or 0),
    }
    if extended:
        # every row read: synced, failed (rejects included), in doubt, or unchanged (a stage
        # found nothing to send)
        rec["rows_read"] = (int(run["rows_synced"]) + failed + int(run["rows_in_doubt"])
                            + int(run.get("rows_unchanged") or 0))
        rec["rows_rejected"] = int(run["rows_rejected"])
        rec["rows_in_doubt"] = int(run["rows_in_doubt"])
        rec["rows_unchanged"] = int(run.get("rows_unchanged") or 0)
        rec["rows_skipped_null_cursor"] = int(run.get("rows_skipped_null_cursor") or 0)
        rec["errors_unmapped"] = int(run.get("errors_unmapped") or 0)
        rec["rows_possibly_duplicated"] = int(run.get("rows_possibly_duplicated") or 0)
        rec["rows_left"] = int(run.get("rows_left") or 0)  # of rows_synced: users who left
        rec["mode"] = run["mode"]
        rec["run_id"] = run["run_id"]
        if run.get("message"):
            rec["message"] = run["message"]
    return rec


def encode_page_cursor(seq: int) -> str:
    """The cursor of the page whose first (newest) record is run `seq`."""
    return base64.urlsafe_b64encode(f"s{seq}".encode()).decode().rstrip("=")


def decode_page_cursor(cursor: str) -> int:
    """The run seq a cursor names; raises InvalidCursor for anything this module did not make."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidCursor(cursor) from exc
    if not text.startswith("s") or not text[1:].isdigit() or len(text) > 12:
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
    fewer records exist; no prev on a call without cursor (nor on the newest page); no next on
    the last page.

    A cursor names the run seq that starts its page, so a page shows the same records however
    many runs were added since the cursor was handed out. Raises InvalidCursor for a cursor that
    does not decode or names no run of this integration."""
    top: int | None = None
    if cursor is not None:
        top = decode_page_cursor(cursor)
        if store.run_seqs(integration, at_most=top, limit=1) != [top]:
            raise InvalidCursor(cursor)
    seqs = store.run_seqs(integration, at_most=top, limit=PAGE_SIZE + 1)
    shown = seqs[:PAGE_SIZE]
    results = [record(r, extended=extended) for r in store.runs_by_seq(integration, shown)]
    if store.count_runs(integration) <= PAGE_SIZE:
        return StatusPage(results, None, None)
    next_cursor = encode_page_cursor(seqs[PAGE_SIZE]) if len(seqs) > PAGE_SIZE else None
    prev_cursor = None
    if top is not None:
        newer = store.run_seqs(integration, above=top, limit=PAGE_SIZE)
        if newer:
            prev_cursor = encode_page_cursor(newer[-1])
    return StatusPage(results, prev_cursor, next_cursor)


NO_KEY_VALUE = "(no value)"
"""How an empty row key part (a NULL or empty key column, often a missing identifier) is
shown in the errors listing and the rejects artifact."""


def shown_key(row_key: str) -> str:
    """A stored row key for people: each empty part (NULL identifier...) as NO_KEY_VALUE."""
    return "|".join(part or NO_KEY_VALUE for part in row_key.split("|"))


def run_errors(store: StateStore, run_id: str, limit: int = 1000) -> list[dict[str, Any]]:
    """Rejected, failed and in-doubt rows of one run: kind, row key (as `shown_key`) and reason
    (no payload)."""
    rows = store.run_errors(run_id, limit)
    return [{**r, "row_key": shown_key(r["row_key"])} for r in rows]


def flag_alert(store: StateStore, record: dict[str, Any], threshold: float | None
               ) -> str | None:
    """Why the finished run needs attention (`alert_reason`), also written as its record's
    message when it has none, in the state and in `record`."""
    reason = alert_reason(record, threshold)
    if reason and not record.get("message") and "run_id" in record:
        store.set_message(record["run_id"], reason)
        record["message"] = reason
    return reason


def alert_reason(record: dict[str, Any], threshold: float | None) -> str | None:
    """Why a finished run needs a person's attention, or None: it ended in error or
    config_error, or the share of failed rows passed `threshold`
    (`failed_rows_alert_share`)."""
    status = record.get("job_status")
    if status in ("error", "config_error"):
        return f"sync ended in {status}: {record.get('message') or 'see the run logs'}"
    read = record.get("rows_read") or 0
    failed = record.get("rows_failed_with_errors", 0)
    if threshold is not None and read and failed / read > threshold:
        return (f"{failed} of {read} rows failed ({failed / read:.1%}), above the alert "
                f"threshold failed_rows_alert_share = {threshold:.1%}")
    return None
