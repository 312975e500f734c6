"""Prefect flows: parameters in, pipeline call, artifacts out. No SQL, HTTP or business rules.

`sync_integration` syncs one integration file; `sync_folder` syncs every integration of a
folder, one task each. The flow run fails (so Prefect automations fire) when the run ends in
`error` or `config_error`, or when the share of failed rows passes the integration's
`failed_rows_alert_share`; the status record says the same.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact

from engage_sync.errors import SyncError
from engage_sync.pipeline import RunOptions
from engage_sync.runner import open_state, sync_file

Mode = Literal["incremental", "backfill", "full_resync"]


class SyncAlert(RuntimeError):
    """Raised to fail the Prefect flow run of a sync that needs a person's attention."""


def alert_reason(record: dict[str, Any], threshold: float | None) -> str | None:
    status = record.get("job_status")
    if status in ("error", "config_error"):
        return f"sync ended in {status}: {record.get('message', 'see the run logs')}"
    read = record.get("rows_read") or 0
    failed = record.get("rows_failed_with_errors", 0)
    if threshold is not None and read and failed / read > threshold:
        return (f"{failed} of {read} rows failed ({failed / read:.1%}), above the alert "
                f"threshold of {threshold:.1%}")
    return None


def _progress_logger() -> Any:
    logger = get_run_logger()
    last = [0.0]

    def report(counts: dict[str, int]) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0:
            last[0] = now
            logger.info("progress: %s", ", ".join(f"{k} {v}" for k, v in counts.items()))

    return report


def _artifacts(name: str, record: dict[str, Any], state_url: str | None) -> None:
    key = "".join(c if c.isalnum() else "-" for c in name.lower())
    create_table_artifact(table=[record], key=f"sync-status-{key}",
                          description=f"engage-sync status record of {name}")
    store = open_state(state_url)
    errors = [{"kind": e["kind"], "row_key": e["row_key"], "reason": e["reason"]}
              for e in store.errors(name, limit=500)]
    if errors:
        create_table_artifact(table=errors, key=f"sync-rejects-{key}",
                              description=f"rejected and failed rows of {name} (keys, reasons)")


def run_one(path: str, mode: Mode, start: datetime | None, end: datetime | None,
            dry_run: bool, state_url: str | None) -> dict[str, Any]:
    logger = get_run_logger()
    options = RunOptions(mode=mode, dry_run=dry_run, start=start, end=end)
    store = open_state(state_url)
    try:
        outcome = sync_file(path, options=options, store=store, on_progress=_progress_logger())
    except SyncError as exc:
        raise SyncAlert(str(exc)) from exc
    if outcome.dry_run is not None:
        d = outcome.dry_run
        logger.info("dry run: %s rows, %s requests, %s rejects", d.rows, d.requests,
                    len(d.rejects))
        return {"integration": outcome.integration, "dry_run": True, "rows": d.rows,
                "requests": d.requests, "rejects": [list(r) for r in d.rejects[:100]],
                "sample": [b.decode() for b in d.sample]}
    record = outcome.record or {}
    _artifacts(outcome.integration, record, state_url)
    from engage_sync.config import load_integration

    reason = alert_reason(record, load_integration(path).failed_rows_alert_share)
    if reason:
        raise SyncAlert(f"integration {outcome.integration}: {reason}")
    logger.info("integration %s: %s", outcome.integration, record)
    return record


@flow(name="engage-sync", log_prints=True)
def sync_integration(
    integration: str,
    mode: Mode = "incremental",
    start: datetime | None = None,
    end: datetime | None = None,
    dry_run: bool = False,
    state_url: str | None = None,
) -> dict[str, Any]:
    """Sync one integration file (path) and return its status record."""
    return run_one(integration, mode, start, end, dry_run, state_url)


@task(name="sync-integration", retries=0)
def sync_task(path: str, mode: Mode, dry_run: bool, state_url: str | None) -> dict[str, Any]:
    return run_one(path, mode, None, None, dry_run, state_url)


@flow(name="engage-sync-folder", log_prints=True)
def sync_folder(folder: str = "config", mode: Mode = "incremental", dry_run: bool = False,
                state_url: str | None = None) -> dict[str, Any]:
    """Sync every integration file of a folder, one task each, in file-name order."""
    from engage_sync.config import integration_files

    results: dict[str, Any] = {}
    failures = []
    for path in integration_files(folder):
        try:
            results[Path(path).stem] = sync_task(str(path), mode, dry_run, state_url)
        except Exception as exc:
            failures.append(f"{Path(path).stem}: {exc}")
    if failures:
        raise SyncAlert("; ".join(failures))
    return results


def sync_flow_or_direct(path: str, *, mode: Mode = "incremental", dry_run: bool = False,
                        state_url: str | None = None, use_prefect: bool = True) -> Any:
    """The CLI's entry: a Prefect flow run, or the pipeline alone with --no-prefect."""
    if use_prefect:
        return sync_integration(path, mode=mode, dry_run=dry_run, state_url=state_url)
    outcome = sync_file(path, options=RunOptions(mode=mode, dry_run=dry_run),
                        store=open_state(state_url))
    if outcome.dry_run is not None:
        d = outcome.dry_run
        return {"rows": d.rows, "requests": d.requests, "rejects": d.rejects}
    return outcome.record
