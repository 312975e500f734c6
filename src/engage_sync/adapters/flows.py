"""Prefect flows: parameters in, pipeline call, artifacts out. No SQL, HTTP or business rules.

`sync_integration` syncs one integration; `sync_folder` syncs every integration of a folder, one
task each, identity operations first and deletes last, sharing one set of rate budgets.
`sync_integration` is an async flow whose body runs the whole sync on the event loop's thread,
the loop blocked meanwhile (the main thread: SIGTERM's graceful stop, CPU pinning); nothing of
Prefect's runs on that loop meanwhile, and the Prefect calls in it that pick sync or async by
the context (artifacts, blocks) pass `_sync=True` (in an async flow's run they would return
coroutines). It is async because Prefect's sync engine waits at a flow run's end for its
heartbeat thread to wake from its one-second sleep, where the async engine leaves it to end
alone. `run_blocking` runs it as the
CLI does: `asyncio.run`, with Ctrl-C interrupting the sync at once as in a sync flow. The
parameters are typed so the Prefect UI renders them as a form, and a run started from the UI,
from `prefect deployment run … --param …` or from `engage-sync run` does the same thing.

A flow run fails (so Prefect automations and notifications fire) when the sync ends in `error`
or `config_error`, or when the share of failed rows passes the integration's
`failed_rows_alert_share`; the status record's `message` says the same. Such a flow (or task)
returns a Failed state whose message is the failure's one line (`_failed`), not a raised
SyncAlert: Prefect then logs it once, in the user's words, with no exception repr or traceback,
and calling the flow still raises the SyncAlert. A run that finds its
integration's run of the same mode still going in another process (a schedule's tick during a
long first load) opens no warehouse, sends and records nothing, and ends in a Completed state
named "Skipped", which says why: no alert fires every tick (a folder's run goes on with the
next integration). Each run leaves its
status record and its rejected rows (keys and reasons, never payload values) as table
artifacts, then prunes row error records older than the retention age.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from engage_sync.adapters import folder_runs, prefect_exit, run_logs
from engage_sync.adapters.artifacts import leave_artifacts
from engage_sync.adapters.failures import SyncAlert, one_line
from engage_sync.adapters.secret_blocks import secret_block
from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.config.files import integration_files, resolve_integration
from engage_sync.config.run_options import run_options
from engage_sync.cursor.progress import Mode
from engage_sync.deliver.definitions import DefinitionsCache
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.errors import SKIPPED, RunInProgress, SyncError
from engage_sync.state.retention import prune_quietly
from engage_sync.state.store import StateStore
from engage_sync.status.progress_report import ProgressReporter

prefect_exit.register()  # no DuckDB leak report at exit of a process that ran a flow


def run_one(integration: str, mode: Mode = "incremental", start: datetime | None = None,
            end: datetime | None = None, dry_run: bool = False, resend_events: bool = False,
            config_dir: str | None = None, state_url: str | None = None,
            budgets: RateBudgets | None = None, allow_deletes: int | None = None,
            partitions: int | None = None, send_whole: bool = False,
            accept_schema: bool = False, allow_points: int | None = None,
            definitions: DefinitionsCache | None = None) -> dict[str, Any]:
    """One integration inside a flow or task run: the status record, a dry run's summary, or
    `{"skipped": message}` while another process runs it. Raises SyncAlert when the run needs
    attention."""
    store = open_state(state_url)
    try:
        return _run_one(store, integration, mode, start, end, dry_run, resend_events,
                        config_dir, budgets, allow_deletes, partitions, send_whole,
                        accept_schema, allow_points, definitions)
    finally:
        store.engine.dispose()  # a serving process runs many flows: release its connections


def _run_one(store: StateStore, integration: str, mode: Mode, start: datetime | None,
             end: datetime | None, dry_run: bool, resend_events: bool, config_dir: str | None,
             budgets: RateBudgets | None, allow_deletes: int | None,
             partitions: int | None = None, send_whole: bool = False,
             accept_schema: bool = False, allow_points: int | None = None,
             definitions: DefinitionsCache | None = None, prune: bool = True
             ) -> dict[str, Any]:
    from engage_sync.adapters.task_runners import prefect_runner  # prefect-dask only when asked

    logger = get_run_logger()
    progress = ProgressReporter(logger.info)
    try:
        options = run_options(mode, start, end, dry_run, resend_events, allow_deletes,
                              partitions, send_whole, accept_schema, allow_points)
        path = resolve_integration(integration, config_dir)
        with run_logs.shipped():
            outcome = sync_file(path, options=options, store=store, budgets=budgets,
                                on_progress=progress, runner=prefect_runner,
                                blocks=secret_block, definitions=definitions)
    except RunInProgress as exc:  # nothing read or sent: not a failure to alert on
        said = one_line(exc, Path(integration).stem)
        logger.warning("skipped: %s", said)
        return {SKIPPED: said}
    except SyncError as exc:  # the UI's state message and the CLI's last line say the same
        raise SyncAlert(one_line(exc, Path(integration).stem)) from exc
    if outcome.dry_run is not None:
        d = outcome.dry_run
        logger.info("dry run of %s: %s rows, %s requests, %s rejects", outcome.integration,
                    d.rows, d.requests, len(d.rejects))
        return d.summary(outcome.integration)
    record = dict(outcome.record or {})
    progress.finish(record)
    leave_artifacts(outcome.integration, record, store, prune=prune)
    if outcome.writeback_error:  # logged by the write-back; the next run writes it
        logger.warning("integration %s: write-back failed, the next run tries again",
                       outcome.integration)
    if outcome.alert:
        raise SyncAlert(f"integration {outcome.integration}: {outcome.alert}")
    logger.info("integration %s: %s", outcome.integration, record)
    return record


def _run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters
    name = Path(str(params.get("integration") or params.get("folder") or "sync")).stem
    return f"{name}-{params.get('mode', 'incremental')}"


@flow(name="engage-sync", log_prints=True, flow_run_name=_run_name)
async def sync_integration(
    integration: str,
    mode: Mode = "incremental",
    start: datetime | None = None,
    end: datetime | None = None,
    dry_run: bool = False,
    resend_events: bool = False,
    allow_deletes: int | None = None,
    config_dir: str | None = None,
    state_url: str | None = None,
    partitions: int | None = None,
    send_whole: bool = False,
    accept_schema: bool = False,
    allow_points: int | None = None,
) -> dict[str, Any] | State[Any]:
    """Sync one integration and return its status record (or a "Skipped" state while another
    process runs the integration in the same mode). Async only for Prefect's engine (the module's
    docstring): the sync runs on the calling thread; from Python, `run_blocking(...)` (or
    `asyncio.run`, or `await` in a running loop).

    Args:
        integration: Integration file path, or its name in the config folder.
        mode: incremental (from the stored cursor), backfill (rows with start <= UPDATED_AT <
            end, sent with the bulk header; the cursor does not move) or full_resync (all rows).
        start: Backfill only: first UPDATED_AT included (UTC when no zone is given).
        end: Backfill only: first UPDATED_AT excluded (default: now minus the settle lag).
        dry_run: Read, validate and batch; send and record nothing.
        resend_events: Backfill only: send again events and purchases already delivered.
        allow_deletes: Deletes only: allow this many deletions in this run, above max_deletes.
        config_dir: Folder of integration files (default ENGAGE_SYNC_CONFIG_DIR or ./config).
        state_url: SQLAlchemy URL of the state database (default ENGAGE_SYNC_STATE_URL).
        partitions: Split the run into this many partitions by a hash of the user key, each a
            task run on the integration's task_runner (default: its `partitions`, 1).
        send_whole: Send every attribute object read whole instead of only what differs from
            the field record (every mode diffs by default, backfills and full resyncs too);
            for when the service's profiles are known to have drifted.
        accept_schema: Accept a changed type of a mapped column or payload key in the source
            (a run stops before sending anything when it changed since the last run).
        allow_points: Let this run bill up to this many data points, above the caps.
    """
    try:
        result = run_one(integration, mode, start, end, dry_run, resend_events, config_dir,
                         state_url, allow_deletes=allow_deletes, partitions=partitions,
                         send_whole=send_whole, accept_schema=accept_schema,
                         allow_points=allow_points)
    except SyncAlert as exc:
        return _failed(exc)
    if SKIPPED in result:
        return Completed(name="Skipped", message=result[SKIPPED], data=result)
    return result


@task(name="sync-integration", retries=0, cache_policy=NO_CACHE,
      task_run_name="{integration}")
def sync_task(integration: str, mode: Mode, start: datetime | None, end: datetime | None,
              dry_run: bool, resend_events: bool, state_url: str | None,
              budgets: RateBudgets, store: StateStore | None = None,
              definitions: DefinitionsCache | None = None) -> dict[str, Any] | State[Any]:
    """One integration of a folder; on the folder's shared `store` and definitions when given."""
    try:
        if store is not None:
            return _run_one(store, integration, mode, start, end, dry_run, resend_events,
                            None, budgets, None, definitions=definitions,
                            prune=False)  # the folder prunes once, at its end
        return run_one(integration, mode, start, end, dry_run, resend_events, None, state_url,
                       budgets, definitions=definitions)
    except SyncAlert as exc:
        return _failed(exc)


def _failed(alert: SyncAlert) -> State[Any]:
    """The Failed state of a run that needs attention: its message the alert's one line (the
    UI's and the log's only line about it); calling the flow or task raises `alert`."""
    return Failed(message=str(alert), data=alert)


@flow(name="engage-sync-folder", log_prints=True, flow_run_name=_run_name)
def sync_folder(
    folder: str = "config",
    mode: Mode = "incremental",
    start: datetime | None = None,
    end: datetime | None = None,
    dry_run: bool = False,
    resend_events: bool = False,
    state_url: str | None = None,
    folder_concurrency: int | None = None,
) -> dict[str, Any] | State[Any]:
    """Sync every integration file of a folder: identify, merges, alias renames, subscriptions,
    attributes, events, purchases, then deletes (`adapters/folder_runs.py`: the integrations
    of one rank side by side); all share one set of rate budgets, one state store and one read
    of the workspace's attribute definitions (`deliver/definitions.py`, a few minutes).

    Args:
        folder: Folder of integration files (files starting with '_' are skipped).
        mode: incremental, backfill (with start / end) or full_resync, for every integration.
        start: Backfill only: first UPDATED_AT included.
        end: Backfill only: first UPDATED_AT excluded.
        dry_run: Read, validate and batch; send and record nothing.
        resend_events: Backfill only: send again events the incremental sync delivered.
        state_url: SQLAlchemy URL of the state database (default ENGAGE_SYNC_STATE_URL).
        folder_concurrency: Integrations run at once (default ENGAGE_SYNC_FOLDER_CONCURRENCY,
            else 4); the state store's pool holds two connections for each.
    """
    budgets = RateBudgets()
    definitions = DefinitionsCache()  # the workspace's attribute definitions, read once
    concurrency = folder_runs.folder_concurrency(folder_concurrency)
    store = folder_runs.shared_state(state_url, concurrency)
    try:
        ran = folder_runs.run_folder(
            integration_files(folder), lambda path: sync_task(
                str(path), mode, start, end, dry_run, resend_events, state_url, budgets, store,
                definitions),
            concurrency)
        prune_quietly(store)
    finally:
        store.engine.dispose()
    results = {k: v for k, v in ran.items() if not isinstance(v, Exception)}
    failures = [f"{k}: {v}" for k, v in ran.items() if isinstance(v, Exception)]
    if failures:
        return _failed(SyncAlert("; ".join(failures)))
    return results


def sync_flow(path: str, *, mode: Mode = "incremental", start: datetime | None = None,
              end: datetime | None = None, dry_run: bool = False, resend_events: bool = False,
              allow_deletes: int | None = None, state_url: str | None = None,
              partitions: int | None = None, send_whole: bool = False,
              accept_schema: bool = False, allow_points: int | None = None) -> Any:
    """The CLI's entry to a Prefect flow run (`--no-prefect` calls `wiring.run_direct`)."""
    return run_blocking(sync_integration(
        path, mode=mode, start=start, end=end, dry_run=dry_run,
        resend_events=resend_events, allow_deletes=allow_deletes, state_url=state_url,
        partitions=partitions, send_whole=send_whole, accept_schema=accept_schema,
        allow_points=allow_points))


def run_blocking(flow_run: Coroutine[Any, Any, Any]) -> Any:
    """`asyncio.run(flow_run)` for a flow whose body blocks the loop, with SIGINT left as it was
    when it was Python's default (Ctrl-C raises KeyboardInterrupt wherever the sync is, as in a
    sync flow): `asyncio.run` would take it over, cancelling the flow's task, which a body that
    never awaits sees only at its end, so the sync went on and the run then ended Crashed."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return asyncio.run(flow_run)
    signal.signal(signal.SIGINT, _interrupt)  # not the default handler: asyncio leaves it
    try:
        return asyncio.run(flow_run)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.default_int_handler(signum, frame)
