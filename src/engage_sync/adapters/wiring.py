"""Wiring: a run's dependencies built from an integration file and settings, then the run.

The seam between the CLI / Prefect flows and the pure pipeline: engines, HTTP clients and the
state store are made here, once per call, and closed after.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from pydantic import SecretStr

from engage_sync import kinds
from engage_sync.adapters import lineage
from engage_sync.adapters.budgets import budgets_for
from engage_sync.adapters.failures import recorded
from engage_sync.adapters.gc_tuning import tune_gc
from engage_sync.adapters.stop_signal import stop_on_sigterm
from engage_sync.config import secrets
from engage_sync.config.files import load_integration
from engage_sync.config.integration import Integration
from engage_sync.config.run_options import RunOptions
from engage_sync.cpu_affinity import pin_setting, run_pin
from engage_sync.deliver.key_check import check_key
from engage_sync.deliver.lean_transport import LeanTransport
from engage_sync.deliver.proxies import proxy_for
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.errors import ConfigError, RunInProgress
from engage_sync.partitions.coordinator import Execute, PartitionJob, count_for, run_partitioned
from engage_sync.partitions.scope import PartitionScope
from engage_sync.read import duckdb_turns, key_digest
from engage_sync.run.dry_run import DryRun, dry_run
from engage_sync.run.loop import Deps, run_sync
from engage_sync.run.resume import refuse_if_in_progress
from engage_sync.run.retries import retry_failed_rows
from engage_sync.run.schema_guard import guard_schema
from engage_sync.run.stop import StopRequest
from engage_sync.state.store import StateStore
from engage_sync.status.record import alert_reason
from engage_sync.writeback.writer import write_back

log = logging.getLogger("engage_sync.adapters.wiring")

DEFAULT_STATE_URL = "sqlite:///.engage-sync/state.db"
STOP_MARGIN = 5.0  # seconds a stopped run has beyond one attempt's timeout to end
DUCKDB_MEMORY_LIMIT = "128MB"  # override with ?memory_limit=... in the warehouse URL


def state_url(explicit: str | None = None) -> str:
    return explicit or os.environ.get("ENGAGE_SYNC_STATE_URL") or DEFAULT_STATE_URL


def open_state(url: str | None = None) -> StateStore:
    url = state_url(url)
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)  # relative or absolute
    return StateStore.from_url(url)


def warehouse_engine(integration: Integration, read_only: bool = False) -> sa.Engine:
    """The warehouse's engine; `read_only` opens a DuckDB file read-only, so that several
    processes (the workers of a partitioned run) may read it at once."""
    url = secrets.expand(integration.warehouse.url, integration=integration.name,
                         key="warehouse.url")
    connect_args = secrets.connect_args(integration.warehouse.connect_args, integration.name)
    try:
        duckdb = url.startswith("duckdb:")
        if read_only and duckdb:
            connect_args["read_only"] = True
        engine = sa.create_engine(url, **({"connect_args": connect_args} if connect_args else {}))
        if duckdb:
            duckdb_turns.take_turns(engine, integration.warehouse.lock_wait_seconds)
        if duckdb and "memory_limit" not in url:
            # DuckDB sorts a window (or each slice of a large one, `duckdb_slices`) before
            # its first batch; a memory limit makes it spill to disk instead, which keeps
            # the sync's memory flat with the row count.
            # SET (not connect-time config) so other connections to the file stay compatible.
            sa.event.listen(engine, "connect", _limit_duckdb_memory)
        if engine.dialect.name == "sqlite":  # digests of payload key columns (key_digest)
            sa.event.listen(engine, "connect", key_digest.sqlite_md5)
        return engine
    except Exception as exc:
        raise ConfigError(
            f"integration {integration.name}: cannot use warehouse URL "
            f"{secrets.redact_url(url)}: {exc}", key="warehouse.url") from exc


def with_expanded_service(integration: Integration) -> Integration:
    """The integration with `${VAR:-default}` references of service.base_url expanded."""
    url = secrets.expand(integration.service.base_url, integration=integration.name,
                         key="service.base_url")
    return integration.model_copy(
        update={"service": integration.service.model_copy(update={"base_url": url})})


def _limit_duckdb_memory(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")


def http_transport(integration: Integration) -> httpx.BaseTransport:
    """The keep-alive pool a run sends through (`deliver.Deliverer`): one connection per request
    in flight, through the proxy the environment names for the service's URL, by the standard
    library's rules (`proxies.proxy_for`). A proxy httpx cannot use is a ConfigError
    that shows it with its password hidden."""
    s = integration.service
    in_flight = s.max_in_flight
    proxy = proxy_for(s.base_url)
    if proxy is None:
        return LeanTransport(max_idle=in_flight)
    try:
        return httpx.HTTPTransport(
            limits=httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight),
            proxy=proxy)
    except (ValueError, httpx.InvalidURL):
        raise ConfigError(
            f"integration {integration.name}: the proxy the environment names for "
            f"{secrets.redact_url(s.base_url)} is not a proxy URL "
            f"({secrets.redact_url(proxy or '')}); check HTTPS_PROXY, HTTP_PROXY and ALL_PROXY",
            key="service.base_url") from None


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

SecretBlocks = Callable[[str, str], str]
"""(integration, block name) → the value of that Prefect Secret block; given only by the
paths that run Prefect (`adapters/secret_blocks.py`)."""


def service_key(integration: Integration, blocks: SecretBlocks | None = None) -> str:
    """The API key: from the Prefect Secret block `service.api_key_block` names, else from
    the variable `service.api_key_env` names. A block without Prefect is a ConfigError."""
    name = integration.service.api_key_block
    if name is None:
        return secrets.api_key(integration.name, integration.service.api_key_env)
    if blocks is None:
        raise ConfigError(
            f"integration {integration.name}: the API key is in the Prefect Secret block "
            f"{name!r} ('service.api_key_block'), which only runs with Prefect read; run the "
            "integration as a flow (without --no-prefect), or name an environment variable "
            "in 'service.api_key_env' instead", key="service.api_key_block")
    return blocks(integration.name, name)


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
) -> RunResult:
    """Run one integration file end to end, partitioned when it asks for partitions (then
    `runner` executes them: threads of this process by default). `stop`, once set, stops an
    unpartitioned run resumable (RunStopped), within the attempt timeout + 5 s.
    Raises ConfigError / SyncError after recording. Told to OpenLineage when it is
    configured (`lineage`). With `writeback`, the runs it recorded are then written back to
    the warehouse (`writeback/`), which never fails the sync. `blocks` reads Prefect Secret
    blocks (`service_key`)."""
    tune_gc()  # a sync allocates per row and frees by reference count (gc_tuning)
    options = options or RunOptions()
    store = store or open_state()
    since = _utcnow()
    with lineage.observe(path, live=not options.dry_run, store=store) as seen:
        try:
            result = _sync(path, options, store, budgets, on_progress, clock or _utcnow,
                           runner, seen, stop, blocks)
        except RunInProgress:  # another process's run: its write-back is its own
            raise
        except Exception:
            _write_back(path, options, store, since)
            raise
        result.writeback_error = _write_back(path, options, store, since)
        seen.finish(result.record)
    return result


def _write_back(path: str | Path, options: RunOptions, store: StateStore, since: datetime
                ) -> str | None:
    """The runs recorded since `since` (and those left pending) to the warehouse, when the
    integration asks for it; never raises."""
    if options.dry_run:
        return None
    try:
        integration = with_expanded_service(load_integration(path))
    except ConfigError:
        return None  # recorded as the run's config_error: nothing to write it with
    return write_back(integration, store, since)


def _sync(path: str | Path, options: RunOptions, store: StateStore,
          budgets: RateBudgets | None, on_progress: Callable[[dict[str, int]], None] | None,
          clock: Callable[[], datetime], runner: Runner | None,
          seen: lineage.Observer, stop: StopRequest | None,
          blocks: SecretBlocks | None) -> RunResult:
    """What stops the run before its loop opens a run row is recorded (`failures.recorded`),
    a dry run's reads and schema excepted; the key is checked before anything is read."""
    with recorded(store, Path(path).stem, options.mode):
        integration = load_integration(path)
    if not options.dry_run:  # before the warehouse is opened: a DuckDB file would be waited for
        refuse_if_in_progress(store, integration.name, options.mode, options.scope)
    with recorded(store, integration.name, options.mode):
        integration = with_expanded_service(integration)
        engine = warehouse_engine(integration)
    try:
        if options.dry_run:  # records nothing, not even a changed schema
            guard_schema(integration, kinds.kind_of(integration), engine, store, record=False)
            return RunResult(integration.name, dry_run=dry_run(
                integration, engine, store, clock=clock, options=options))
        with recorded(store, integration.name, options.mode):
            key = service_key(integration, blocks)
            run_budgets = budgets_for(integration, budgets)
            pin = pin_setting(os.environ)  # one CPU for the run (cpu_affinity)
            transport = http_transport(integration)
        with transport:
            with recorded(store, integration.name, options.mode):
                check_key(transport, integration.service, key, integration.name)
                guard_schema(integration, kinds.kind_of(integration), engine, store,
                             accept=options.accept_schema)
            seen.start(integration, engine)
            result = _send(path, integration, options, runner, stop, pin, Deps(
                engine=engine, state=store, transport=transport, api_key=key,
                budgets=run_budgets, on_progress=on_progress, clock=clock, stop=stop))
        return RunResult(integration.name, record=result,
                         alert=_alert(store, result, integration.failed_rows_alert_share))
    finally:
        duckdb_turns.release(engine)


def _send(path: str | Path, integration: Integration, options: RunOptions,
          runner: Runner | None, stop: StopRequest | None, pin: str | None,
          deps: Deps) -> dict[str, Any]:
    """The rows of failed requests first (incremental and full-resync runs), then the run
    itself: partitioned (`runner` executes the partitions), or in this process, on the CPU
    `pin` names (`cpu_affinity`; a partitioned run is never pinned)."""
    store = deps.state
    count = count_for(store, integration, options)
    if stop is not None and count == 1:  # a partitioned run stops as a crash does
        stop.arm(integration.service.timeout_seconds + STOP_MARGIN)
    with run_pin(pin if count == 1 else None):
        if options.mode in ("incremental", "full_resync"):
            retry_failed_rows(integration, replace(deps, on_progress=None))
        if count == 1:
            return run_sync(integration, deps, options)
    execute = (runner or threads_runner)(integration, deps.budgets)
    with recorded(store, integration.name, options.mode, only=ConfigError):  # a kind not split
        return run_partitioned(str(Path(path).resolve()), integration, options, store,
                               deps.engine, count, execute, deps.clock, portable_url(store),
                               deps.on_progress)


def portable_url(store: StateStore) -> SecretStr:
    """The store's URL for partitions in other threads or processes (a SQLite path made
    absolute), kept secret: it may hold a password."""
    url = store.engine.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        url = url.set(database=str(Path(url.database).resolve()))
    return SecretStr(url.render_as_string(hide_password=False))


def run_partition(job: PartitionJob, budgets: RateBudgets | None = None,
                  blocks: SecretBlocks | None = None) -> dict[str, Any]:
    """One partition of a partitioned run, in whatever process or thread runs it: the state
    database, warehouse, API key and budget come from the job's descriptors and this process's
    environment (or Prefect, `blocks`). `budgets`: the budgets of the coordinator's process
    (threads only)."""
    tune_gc()  # a Dask worker's process syncs too
    store = open_state(None if job.state_url is None else job.state_url.get_secret_value())
    try:
        if not store.has_run(job.parent):
            raise ConfigError(
                f"integration {Path(job.path).stem}: partition {job.label}: the state database "
                "this worker uses holds no run of its coordinator; give the workers the same "
                "state database (ENGAGE_SYNC_STATE_URL, or --state-url)")
        integration = with_expanded_service(load_integration(job.path))
        engine = warehouse_engine(integration, read_only=job.read_only)
        try:
            key = service_key(integration, blocks)
            with http_transport(integration) as transport:
                deps = Deps(engine=engine, state=store, transport=transport, api_key=key,
                            budgets=budgets_for(integration, budgets))
                return run_sync(integration, deps, job.options(),
                                PartitionScope(job.parent, job.index, job.count))
        finally:
            duckdb_turns.release(engine)
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


def _alert(store: StateStore, record: dict[str, Any], threshold: float | None) -> str | None:
    """Why the run needs attention, also written as the record's message if it has none."""
    reason = alert_reason(record, threshold)
    if reason and not record.get("message") and "run_id" in record:
        store.set_message(record["run_id"], reason)
        record["message"] = reason
    return reason


def _utcnow() -> datetime:
    return datetime.now(UTC)


def run_direct(path: str | Path, options: RunOptions, state_url: str | None = None
               ) -> dict[str, Any] | None:
    """The pipeline alone, without Prefect (`engage-sync run --no-prefect`): the status record,
    or a dry run's summary; progress lines on the `engage_sync.progress` logger. Prefect is not
    imported on this path (about 40 MB and a second of start-up)."""
    from engage_sync.state import retention
    from engage_sync.status.progress_report import ProgressReporter

    store = open_state(state_url)
    progress = ProgressReporter(logging.getLogger("engage_sync.progress").info)
    try:
        with stop_on_sigterm() as stop:  # SIGTERM: stop resumable (RunStopped)
            outcome = sync_file(path, options=options, store=store, on_progress=progress,
                                stop=stop)
        if outcome.dry_run is not None:
            return outcome.dry_run.summary(outcome.integration)
        progress.finish(outcome.record or {})
        retention.prune(store)
        return outcome.record
    finally:
        store.engine.dispose()
