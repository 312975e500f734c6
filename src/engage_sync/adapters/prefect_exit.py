"""Stop Prefect's background threads before the interpreter exits.

Prefect keeps daemon threads (its global and run-sync event loops, the log and event workers)
alive to the end of a process that ran a flow. Their frames and pending tasks hold the flow
run's context, and through it the flow's module, the pipeline and the DuckDB engine's dialect;
a daemon thread still alive at finalization is frozen with all of that, so DuckDB's nanobind
objects outlive the module teardown and nanobind prints ~40 lines of `leaked … instances`.

`stop_prefect_threads` drains Prefect's queue services (logs and events are sent first, as
Prefect's own exit hooks would) and stops and joins its loop threads. It runs at exit of every
process that imported engage_sync.adapters.flows (the CLI, serve.py and the flow runs it starts).
A flow run's heartbeat thread is not among them: the async engine (`flows.sync_integration`)
leaves it to end within a second, asleep; it holds the flow run's context, not the sync's
objects (the body's locals, gone by then).
"""

from __future__ import annotations

import atexit
import logging

JOIN_SECONDS = 5.0


def stop_prefect_threads() -> None:
    """Drain Prefect's services and join its event-loop threads; never raises."""
    try:
        from prefect._internal.concurrency.services import QueueService
        from prefect._internal.concurrency.threads import get_global_loop, get_run_sync_loop

        QueueService.drain_all(timeout=JOIN_SECONDS)
        for loop in (get_run_sync_loop(), get_global_loop()):
            loop.shutdown()
            loop.thread.join(JOIN_SECONDS)
    except Exception as exc:  # exiting anyway: say why the threads may linger, nothing more
        logging.getLogger(__name__).debug("stopping Prefect threads: %s", exc)


def register() -> None:
    """Run stop_prefect_threads at exit, before Prefect's own exit hooks (registered earlier,
    atexit runs hooks last-in first-out)."""
    atexit.register(stop_prefect_threads)
