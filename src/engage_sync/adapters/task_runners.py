"""The partitions of a partitioned run as Prefect task runs (Prefect only; no business rules).

`task_runner.type: threads` (the default): Prefect's thread pool in the flow's process; the
partitions share that process's rate budgets. `task_runner.type: dask`: prefect-dask's
`DaskTaskRunner` on a `LocalCluster` of `n_workers` processes started for the run, or on the
existing cluster at `address`; each worker builds its own budgets on the shared store
(`config.partition_problem` refuses a `local` budget there). A task gets a `PartitionJob`
(descriptors; the state URL as a SecretStr) and nothing else: the worker reads the integration
file, and the secrets from the environment variables the file names.
"""

from __future__ import annotations

import math
import time
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture, wait
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from engage_sync.adapters import run_logs
from engage_sync.adapters.secret_blocks import secret_block
from engage_sync.adapters.wiring import run_partition
from engage_sync.config import secrets
from engage_sync.config.integration import Integration
from engage_sync.config.service import TaskRunnerConfig
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.errors import ConfigError
from engage_sync.partitions.coordinator import Execute, PartitionJob

TICK_SECONDS = 2.0


@task(name="sync-partition", retries=0, cache_policy=NO_CACHE,
      task_run_name="partition-{job.index}-of-{job.count}")
def partition_task(job: PartitionJob, budgets: RateBudgets | None = None) -> dict[str, Any]:
    """One partition (Prefect task retries stay off: delivery owns retries, and a partition
    that stopped resumes with the next start of the run). Its engage-sync log lines go to the
    flow run's logs from a Dask worker's process too (Prefect's log worker there sends them
    in batches, and what is left when the worker's process ends)."""
    with run_logs.shipped():
        return run_partition(job, budgets, secret_block)


def task_runner(integration: Integration, partitions: int) -> TaskRunner[Any]:
    """The Prefect task runner the integration's `task_runner` names."""
    cfg: TaskRunnerConfig = integration.task_runner
    if cfg.type == "threads":
        return ThreadPoolTaskRunner(max_workers=partitions)
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ConfigError(
            f"integration {integration.name}: task_runner.type dask needs prefect-dask: "
            "pip install 'engage-sync[dask]'", key="task_runner.type") from None

    if cfg.address is not None:
        address = secrets.expand(cfg.address, integration=integration.name,
                                 key="task_runner.address")
        return DaskTaskRunner(address=address)
    threads = cfg.threads_per_worker or math.ceil(partitions / cfg.n_workers)
    without_profiler()
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs={
        "n_workers": cfg.n_workers, "threads_per_worker": threads, "processes": True,
        "dashboard_address": None})


def without_profiler() -> None:
    """Turn off Dask's statistical profiler for the workers this process starts (their
    nannies hand them this process's config). It samples `sys._current_frames()` every 10 ms,
    and on CPython 3.11 a garbage collection inside that call can deadlock the whole worker
    (python/cpython gh-106883): a partitioned run hung with every thread waiting for the GIL
    and the worker's main thread in `gc_collect_main` under `Worker.trigger_profile`."""
    import dask

    dask.config.set({"distributed.worker.profile.enabled": False})


def prefect_runner(integration: Integration, budgets: RateBudgets) -> Execute:
    """`wiring.Runner` for flows: each partition a task run on the integration's runner."""
    shares_memory = not integration.task_runner.separate_processes

    def execute(jobs: list[PartitionJob], tick: Any) -> list[BaseException | None]:
        with task_runner(integration, len(jobs)) as runner:
            futures: list[PrefectFuture[Any]] = [
                runner.submit(partition_task, {"job": job,
                                               "budgets": budgets if shares_memory else None})
                for job in jobs]
            while True:
                done = wait(futures, timeout=TICK_SECONDS)
                tick()
                if not done.not_done:
                    break
                time.sleep(0)
            return [_error(f) for f in futures]

    return execute


def _error(future: PrefectFuture[Any]) -> BaseException | None:
    try:
        future.result()
    except BaseException as exc:
        return exc
    return None
