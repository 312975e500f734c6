"""Wiring: a run as a sequence, from an integration file to its record.

The seam between the CLI / Prefect flows and the pipeline. The file is read and the run
prepared once (`read.plan.prepare`); the shared resources are opened from the plan
(`adapters/resources.py`) and closed after; every stage is handed the plan. What stops a run
before its loop opens a run row is recorded by the one recorder, `failures.recorded`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from engage_sync.adapters import alert_check, lineage
from engage_sync.adapters.failures import after_the_run, recorded
from engage_sync.adapters.gc_tuning import tune_gc
from engage_sync.adapters.resources import (
    SecretBlocks,
    open_state,
    run_resources,
    writeback_engine,
)
from engage_sync.adapters.stop_signal import stop_on_sigterm
from engage_sync.config.files import load_integration
from engage_sync.config.integration import Integration
from engage_sync.config.run_options import RunOptions
from engage_sync.cpu_affinity import pin_setting, run_pin
from engage_sync.deliver.definitions import DefinitionsCache
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.errors import ConfigError
from engage_sync.partitions.coordinator import Execute, PartitionJob, count_for, run_partitioned
from engage_sync.partitions.scope import PartitionScope
from engage_sync.read.plan import RunPlan, prepare
from engage_sync.run import spend_cap
from engage_sync.run.dry_run import DryRun, dry_run
from engage_sync.run.loop import Deps, run_sync
from engage_sync.run.resume import refuse_if_in_progress
from engage_sync.run.retries import retry_failed_rows
from engage_sync.run.schema_guard import guard_schema
from engage_sync.run.stop import StopRequest
from engage_sync.run.syncs import sync_of
from engage_sync.run.type_check import check_types
from engage_sync.state.store import StateStore
from engage_sync.status.record import flag_alert
from engage_sync.writeback.writer import write_back

log = logging.getLogger("engage_sync.adapters.wiring")

STOP_MARGIN = 5.0  # seconds a stopped run has beyond one attempt's timeout to end


@dataclass
class RunResult:
    integration: str
    record: dict[str, Any] | None = None
    dry_run: DryRun | None = None
    error: str | None = None
    alert: str | None = None
    """Why the finished run needs a person's attention (`status.alert_reason`); the record's
    message says the same."""
    writeback_error: str | None = None
    """Why writing the run back to the warehouse failed (the next run tries again)."""


Runner = Callable[[Integration, RateBudgets], Execute]
"""Given the integration and the process's budgets: how its partitions are executed."""

def sync_file(
    path: str | Path,
    *,
    options: RunOptions | None = None,
    store: StateStore | None = None,
    budgets: RateBudgets | None = None,
    on_progress: Callable[[dict[str, int]], None] | None = None,
    clock: Callable[[], datetime] | None = None,
    runner: Runner | None = None,
    stop: StopRequest | None = None,
    blocks: SecretBlocks | None = None,
    definitions: DefinitionsCache | None = None,
) -> RunResult:
    """Run one integration file end to end, partitioned when it asks for partitions (then
    `runner` executes them: threads of this process by default). `stop`, once set, stops an
    unpartitioned run resumable (RunStopped), within the attempt timeout + 5 s.
    Raises ConfigError / SyncError after recording. Told to OpenLineage when it is
    configured (`lineage`). With `writeback`, the runs it recorded are then written back to
    the warehouse (`writeback/`), which never fails the sync; with `alerts`, its alerts are
    evaluated (`alert_check`). `blocks` reads Prefect Secret blocks
    (`resources.service_key`). `definitions`: a folder's cache of the workspace's
    attribute definitions, shared by its runs (`deliver/definitions.py`)."""
    tune_gc()  # a sync allocates per row and frees by reference count (gc_tuning)
    options = options or RunOptions()
    store = store or open_state()
    since = _utcnow()
    with lineage.observe(path, live=not options.dry_run, store=store) as seen:
        plan = _prepare(path, options, store, seen)
        with (_written_back(plan, store, since) as written,
              alert_check.evaluated_after(plan, store, clock)):
            result = _sync(path, plan, store, budgets, on_progress, clock or _utcnow, runner,
                           seen, stop, blocks, definitions)
        result.writeback_error = written.error
        seen.finish(result.record)
    return result


def _prepare(path: str | Path, options: RunOptions, store: StateStore,
             seen: lineage.Observer) -> RunPlan:
    """The run's plan, from its file read once. A bad file is recorded under the file's stem,
    what follows under the integration's name; another process's run is refused first
    (RunInProgress, nothing recorded), before the warehouse is opened: a DuckDB file would
    be waited for."""
    with recorded(store, Path(path).stem, options.mode) as recording:
        integration = load_integration(path)
        recording.name = integration.name
        seen.named(integration.name)
        if not options.dry_run:
            refuse_if_in_progress(store, integration.name, options.mode, options.scope)
        return prepare(integration, options)


@dataclass
class WrittenBack:
    error: str | None = None
    """Why writing the runs back failed (`write_back`; the next run tries again)."""


@contextmanager
def _written_back(plan: RunPlan, store: StateStore, since: datetime) -> Iterator[WrittenBack]:
    """After the run inside, ended or failed, the runs recorded since `since` (and those left
    pending) are written to the warehouse when the integration asks for it, never raising;
    not after a dry run, an interrupt, or another process's run (RunInProgress: its write-back
    is its own)."""
    written = WrittenBack()

    def write() -> None:
        written.error = write_back(plan, store, since, writeback_engine)

    with after_the_run(write, plan.options.dry_run):
        yield written


def _sync(path: str | Path, plan: RunPlan, store: StateStore, budgets: RateBudgets | None,
          on_progress: Callable[[dict[str, int]], None] | None,
          clock: Callable[[], datetime], runner: Runner | None,
          seen: lineage.Observer, stop: StopRequest | None,
          blocks: SecretBlocks | None, definitions: DefinitionsCache | None) -> RunResult:
    """The run's resources are opened once, before its first stage, the same way for a dry
    run and a live one. Everything that stops a live run before its loop opens a run row is
    recorded at once (`failures.recorded`): the CPU setting, the warehouse, the key, the
    budgets, the transport, the key check (before anything is read), the schema guard, the
    type check, the partitions and the spend cap. A dry run reads and packs, sending and
    recording nothing, not even a changed schema (a warehouse out of reach is recorded, as
    for any run)."""
    live = not plan.options.dry_run
    with ExitStack() as held:
        with recorded(store, plan.name, plan.options.mode):
            pin = pin_setting(os.environ) if live else None  # one CPU for the run
            res = held.enter_context(run_resources(plan, store, budgets, blocks, definitions))
            if res.link is not None:
                link = res.link
                guard_schema(plan, res.engine, store)
                check_types(plan, link.definitions, store, link.transport, link.api_key,
                            res.engine)
                count = count_for(store, plan)  # a kind that cannot be split so: ConfigError
                spend = spend_cap.reserve(plan, res.engine, store, clock)
        if not live:
            guard_schema(plan, res.engine, store, record=False)
            return RunResult(plan.name, dry_run=dry_run(plan, res.engine, store, clock=clock))
        seen.start(plan, res.engine)
        result = _send(path, plan, count, runner, stop, pin, res.state_url, Deps(
            engine=res.engine, state=store, transport=link.transport, api_key=link.api_key,
            budgets=link.budgets, on_progress=on_progress, clock=clock, stop=stop))
    alert = flag_alert(store, result, plan.integration.failed_rows_alert_share)
    spend_cap.settle(store, spend, result)
    return RunResult(plan.name, record=result, alert=alert)


def _send(path: str | Path, plan: RunPlan, count: int, runner: Runner | None,
          stop: StopRequest | None, pin: str | None, state_url: SecretStr, deps: Deps
          ) -> dict[str, Any]:
    """The rows of failed requests first (incremental and full-resync runs), then the run
    itself: in `count` partitions (`runner` executes them, on the state store at
    `state_url`), or in this process, on the CPU `pin` names (`cpu_affinity`; a partitioned
    run is never pinned)."""
    store, integration = deps.state, plan.integration
    if stop is not None and count == 1:  # a partitioned run stops as a crash does
        stop.arm(integration.service.timeout_seconds + STOP_MARGIN)
    with run_pin(pin if count == 1 else None):
        if plan.options.mode in ("incremental", "full_resync"):
            retry_failed_rows(plan, replace(deps, on_progress=None))
        if count == 1:
            return sync_of(plan)(plan, deps)  # by its cursor or by its snapshot
    execute = (runner or threads_runner)(integration, deps.budgets)
    with recorded(store, plan.name, plan.options.mode, only=ConfigError):  # the task runner's
        return run_partitioned(str(Path(path).resolve()), plan, store, deps.engine, count,
                               execute, deps.clock, state_url, deps.on_progress)


def run_partition(job: PartitionJob, budgets: RateBudgets | None = None,
                  blocks: SecretBlocks | None = None) -> dict[str, Any]:
    """One partition of a partitioned run, in whatever process or thread runs it: its plan is
    prepared here from the job's file (a worker gets descriptors only), and the state
    database, warehouse, API key and budget come from the job's descriptors and this
    process's environment (or Prefect, `blocks`). `budgets`: the budgets of the coordinator's
    process (threads only)."""
    tune_gc()  # a Dask worker's process syncs too
    store = open_state(None if job.state_url is None else job.state_url.get_secret_value())
    try:
        if not store.has_run(job.parent):
            raise ConfigError(
                f"integration {Path(job.path).stem}: partition {job.label}: the state database "
                "this worker uses holds no run of its coordinator; give the workers the same "
                "state database (ENGAGE_SYNC_STATE_URL, or --state-url)")
        plan = prepare(load_integration(job.path), job.options())
        with run_resources(plan, store, budgets, blocks, read_only=job.read_only,
                           check=False) as res:
            link = res.link
            assert link is not None  # a partition is a live run's: its job has no dry run
            deps = Deps(engine=res.engine, state=store, transport=link.transport,
                        api_key=link.api_key, budgets=link.budgets)
            return run_sync(plan, deps, PartitionScope(job.parent, job.index, job.count))
    finally:
        store.engine.dispose()


def threads_runner(_: Integration, budgets: RateBudgets) -> Execute:
    """Partitions in threads of this process, sharing its budgets (no Prefect)."""

    def execute(jobs: list[PartitionJob], tick: Callable[[], None]) -> list[BaseException | None]:
        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="partition") as pool:
            futures = [pool.submit(run_partition, job, budgets) for job in jobs]
            return wait_ticking(futures, tick)

    return execute


def wait_ticking(futures: list[Future[Any]], tick: Callable[[], None], every: float = 2.0
                 ) -> list[BaseException | None]:
    """Wait for every future, calling `tick` every `every` seconds and after each one ends;
    each future's exception (None when it returned), in order."""
    pending = set(futures)
    while pending:
        _, pending = wait(pending, timeout=every, return_when=FIRST_COMPLETED)
        tick()
    return [f.exception() for f in futures]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def run_direct(path: str | Path, options: RunOptions, state_url: str | None = None,
               definitions: DefinitionsCache | None = None) -> dict[str, Any] | None:
    """The pipeline alone, without Prefect (`engage-sync run --no-prefect`): the status record,
    or a dry run's summary; progress lines on the `engage_sync.progress` logger. Prefect is not
    imported on this path (its start and memory are spared)."""
    from engage_sync.state import retention
    from engage_sync.status.progress_report import ProgressReporter

    store = open_state(state_url)
    progress = ProgressReporter(logging.getLogger("engage_sync.progress").info)
    try:
        with stop_on_sigterm() as stop:  # SIGTERM: stop resumable (RunStopped)
            outcome = sync_file(path, options=options, store=store, on_progress=progress,
                                stop=stop, definitions=definitions)
        if outcome.dry_run is not None:
            return outcome.dry_run.summary(outcome.integration)
        progress.finish(outcome.record or {})
        retention.prune(store)
        return outcome.record
    finally:
        store.engine.dispose()
