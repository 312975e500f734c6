"""Serve engage-sync deployments to a Prefect server: one per integration file of a folder, or one
for the whole folder. No work pool needed; keep this process running (a systemd unit, a
container). It runs at most --limit flow runs at once (ENGAGE_SYNC_SERVE_LIMIT; one per CPU, at
most 4, by default); Ctrl-C or SIGTERM kills the runs in flight (the next run resumes each),
pauses the schedules and marks what no process will run Cancelled (deployments/README.md).

    python deployments/serve.py config/ --cron "*/15 * * * *"
    python deployments/serve.py config/ --interval 5m --full-resync-cron "0 3 * * sun"
    python deployments/serve.py config/ --per-folder --cron "0 * * * *"

Deployments are named `engage-sync/<integration file name>` (per file) or
`engage-sync-folder/<folder name>` (per folder). Each one's form in the Prefect UI offers the
flow parameters (mode incremental / backfill / full_resync, start, end, dry_run,
resend_events); `prefect deployment run 'engage-sync/10_users' --param mode=full_resync` does
the same from a shell, and `engage-sync backfill` creates its chunk runs on these deployments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import httpx
import yaml
from prefect._internal.observers import FlowRunCancellingObserver
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.runner import Runner
from prefect.schedules import Cron, Interval, Schedule
from prefect.states import Cancelled

from engage_sync.adapters import telemetry
from engage_sync.adapters.flows import sync_folder, sync_integration
from engage_sync.config.durations import parse_duration
from engage_sync.config.files import integration_files

LIMIT_ENV = "ENGAGE_SYNC_SERVE_LIMIT"
LIMIT_CAP = 4  # the default's ceiling: every run in flight writes its states to the Prefect server
PAUSE_SECONDS = 30.0  # at shutdown, how long pausing the schedules may wait for a busy server
HEALTH_SECONDS = 5.0  # at shutdown, whether the Prefect server is there at all
QUIET_LOGGERS = ("prefect.runner.flow_run_executor", "prefect.runner.state_proposer")
SERVER_SECONDS = 30.0  # at shutdown, how long marking runs may wait for the server
START_SECONDS = 10.0  # at shutdown, how long a run being started has to show its process
CANCELLED = "serve.py stopped ({signal}): {what}"


def default_limit() -> int:
    """One flow run per CPU this process may use (a run keeps one busy), at most LIMIT_CAP."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, LIMIT_CAP))


def serve_limit(flag: int | None, environ: Mapping[str, str] = os.environ) -> int | None:
    """Flow runs at once: --limit, else ENGAGE_SYNC_SERVE_LIMIT, else default_limit(); 0 is no
    limit (None, Prefect's spelling)."""
    text = environ.get(LIMIT_ENV, "").strip()
    if flag is None and text:
        try:
            flag = int(text)
        except ValueError:
            raise SystemExit(f"serve.py: {LIMIT_ENV}={text!r} is not a whole number") from None
    limit = default_limit() if flag is None else flag
    if limit < 0:
        raise SystemExit(f"serve.py: a limit of {limit} flow runs: give 0 (none) or more")
    return limit or None


class StoppingRunner(Runner):
    """Prefect's Runner, running at most `limit` flow runs at once and stopping cleanly on SIGINT
    or SIGTERM. Invariants of a stop:
    - no run is started after the signal; with the Prefect server answering its health check,
      the schedules are paused (PAUSE_SECONDS at most: Prefect's own pause retries for minutes)
      and the runs marked as below; without it, one line says what is left to do;
    - each run in flight is killed with its helpers (SIGKILL to its session) and marked Cancelled
      unless it ended Completed meanwhile: the next run resumes it from its journal, as after a
      crash (a SIGTERM would reach a flow run wherever it is, and a run not yet watching for it
      fails, printing a traceback);
    - the deployments' Pending runs and their schedules' Scheduled runs, which no process will
      take, are marked Cancelled; runs created by hand stay Scheduled for the next serve;
    - one line per step and per run, no traceback; a second signal is ignored (said so);
    - flow runs start in their own session, so a terminal's Ctrl-C reaches only this process,
      which then stops them as above (they would otherwise crash on KeyboardInterrupt)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop_signal: str | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._quiet: set[str] = set()  # runs killed here: Prefect's lines on them are dropped
        for name in QUIET_LOGGERS:
            logging.getLogger(name).addFilter(self._not_killed)

    def _not_killed(self, record: logging.LogRecord) -> bool:
        """Prefect's lines on a run this stop killed ("exited due to a SIGKILL … memory
        limits", "reported as crashed") mislead: the stop says what it did, one line a run."""
        text = f"{getattr(record, 'flow_run_id', '')} {record.getMessage()}"
        return not any(flow_run_id in text for flow_run_id in self._quiet)

    async def __aenter__(self) -> StoppingRunner:
        await super().__aenter__()
        if self._cancelling_observer is not None:
            _quiet_cancelled_polling(self._cancelling_observer)
        self._logger.info("serving: every deployment registered, polling for due runs")
        poller, resolve = self._scheduled_run_poller, self._scheduled_run_poller._resolve_starter

        def isolated(flow_run: FlowRun) -> Any:
            starter = resolve(flow_run)
            if hasattr(starter, "_isolate_process_group"):  # prefect.engine in a subprocess
                starter._isolate_process_group = True
            return starter

        poller._resolve_starter = isolated
        return self

    def listen(self) -> None:
        """Take SIGINT and SIGTERM from now on (before the deployments are registered, so a
        signal then stops the runner as soon as it starts)."""
        signal.signal(signal.SIGINT, self.handle_sigterm)
        signal.signal(signal.SIGTERM, self.handle_sigterm)

    async def start(self, run_once: bool = False, webserver: bool | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self.listen()  # asyncio.run took SIGINT over
        if self._stop_signal is not None:
            self._begin_stop()
        await super().start(run_once=run_once, webserver=webserver)

    def handle_sigterm(self, signum: Any = None, *args: Any, **kwargs: Any) -> None:
        # Runs on the main thread between two bytecodes (the loop's thread once it runs): only
        # record the signal and schedule the stop.
        name = signal.Signals(signum).name if signum else "a signal"
        if self._stop_signal is not None:
            self._logger.info("%s received: already stopping (%s)", name, self._stop_signal)
            return
        self._stop_signal = name
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._begin_stop)

    def _begin_stop(self) -> None:
        self._stop_task = asyncio.ensure_future(self._stop())

    async def _stop(self) -> None:
        try:
            while not self.started:  # a signal while the runner starts: stop once it has
                await asyncio.sleep(0.1)
            self._logger.info("%s received: stopping (%d flow run(s) in flight)",
                              self._stop_signal, len(self._process_manager.flow_run_ids()))
            self.stopping = self._scheduled_run_poller.stopping = True
            self.pause_on_shutdown = False  # paused here, when the server answers
            killed = await self._kill_in_flight()
            if not await self._server_answers():
                self._logger.warning(
                    "the Prefect server does not answer: schedules not paused, %d flow run(s) "
                    "not marked Cancelled; pause and cancel them in the UI", len(killed))
                return
            await self._pause_schedules()
            await asyncio.wait_for(self._mark_killed(killed), SERVER_SECONDS)
            await asyncio.wait_for(self._cancel_untaken(killed), SERVER_SECONDS)
        except Exception as exc:  # the server gone mid-way: say so, stop anyway
            self._logger.warning("stopping: %s: %s", type(exc).__name__, exc)
        finally:
            self._loops_task_group.cancel_scope.cancel()

    async def _server_answers(self) -> bool:
        """Whether the Prefect server answers its health check now (no retries)."""
        try:
            async with httpx.AsyncClient(timeout=HEALTH_SECONDS) as client:
                answer = await client.get(f"{str(self._client.api_url).rstrip('/')}/health")
            return answer.status_code == 200
        except httpx.HTTPError:
            return False

    async def _pause_schedules(self) -> bool:
        """Pause every deployment's schedules; whether the server answered in PAUSE_SECONDS."""
        try:
            await asyncio.wait_for(super()._pause_schedules(), PAUSE_SECONDS)
            return True
        except (TimeoutError, OSError, RuntimeError, httpx.HTTPError) as exc:  # no answer
            self._logger.warning("schedules not paused (the Prefect server did not answer in "
                                 "%s s: %s); pause them in the UI if they should stop, and "
                                 "cancel the runs this stop leaves", PAUSE_SECONDS,
                                 type(exc).__name__)
            return False

    async def _kill_in_flight(self) -> set[UUID]:
        """Kill every run with a process here, including runs being started (START_SECONDS at
        most for their process to show); their ids, once the runner is done with them."""
        submitting = self._scheduled_run_poller._submitting_flow_run_ids
        killed: set[UUID] = set()
        deadline = time.monotonic() + START_SECONDS
        while True:
            for flow_run_id in self._process_manager.flow_run_ids() - killed:
                killed.add(flow_run_id)
                self._quiet.add(str(flow_run_id))
                handle = self._process_manager.get(flow_run_id)
                if handle is not None and handle.pid is not None:
                    with contextlib.suppress(OSError):
                        handle.hard_kill()  # its whole session: the run and its helpers
            if not submitting - killed or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        # the executor is done with them (it proposes Crashed after the kill)
        await _until(lambda: not submitting & killed, START_SECONDS)
        return killed

    async def _mark_killed(self, killed: set[UUID]) -> None:
        for flow_run_id in killed:
            flow_run = await self._client.read_flow_run(flow_run_id)
            if flow_run.state is not None and (flow_run.state.is_completed()
                                               or flow_run.state.is_cancelled()):
                self._logger.info("flow run '%s' ended %s", flow_run.name, flow_run.state.name)
            else:
                await self._mark_cancelled(flow_run, "killed in flight; the next run resumes "
                                                     "from where it stopped")

    async def _cancel_untaken(self, handled: set[UUID]) -> None:
        """Cancel the deployments' Pending runs and their schedules' Scheduled runs that no
        process here took."""
        ids = list(self._deployment_registry.get_deployment_ids())
        if not ids:
            return
        runs: list[FlowRun] = []
        while True:
            page = await self._client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=ids)),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=[StateType.PENDING, StateType.SCHEDULED]))),
                limit=200, offset=len(runs))
            runs += page
            if len(page) < 200:
                break
        untaken = [r for r in runs if r.id not in handled]
        pending = [r for r in untaken if r.state is not None and r.state.is_pending()]
        ticks = [r for r in untaken if r not in pending and r.auto_scheduled]
        for flow_run in pending:
            await self._mark_cancelled(flow_run, "no process will run it")
        for flow_run in ticks:  # a paused schedule's runs that were due: one line for all
            await self._mark_cancelled(flow_run, "its schedule is paused", logging.DEBUG)
        if ticks:
            self._logger.info("%d scheduled run(s) of the paused schedules cancelled",
                              len(ticks))
        if by_hand := len(untaken) - len(pending) - len(ticks):
            self._logger.info("%d flow run(s) created by hand stay Scheduled for the next serve",
                              by_hand)

    async def _mark_cancelled(self, flow_run: FlowRun, why: str, level: int = logging.INFO
                              ) -> None:
        was = flow_run.state.name if flow_run.state else "no state"
        message = CANCELLED.format(signal=self._stop_signal, what=why)
        await asyncio.wait_for(self._client.set_flow_run_state(
            flow_run.id, Cancelled(message=message), force=True), SERVER_SECONDS)
        self._logger.log(level, "flow run '%s' (%s) cancelled: %s", flow_run.name, was, why)


def _quiet_cancelled_polling(observer: FlowRunCancellingObserver) -> None:
    """Prefect's cancellation observer polls the server when its events stream is gone (the
    server stopped before or while serving) and, at a stop, cancels that polling task, whose
    done-callback then asks the cancelled task for its exception: asyncio prints the
    CancelledError's traceback. A cancelled poll is the stop, not a failure: not reported."""
    report = observer._handle_polling_task_done

    def unless_cancelled(task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            report(task)

    start = observer._start_polling_task

    def start_polling(task: asyncio.Task[None]) -> None:  # the stream lost while serving
        start(task)
        _swap_callback(observer._polling_task, report, unless_cancelled)

    _swap_callback(observer._polling_task, report, unless_cancelled)
    consumer = observer._consumer_task
    if consumer is not None and consumer.remove_done_callback(start):
        consumer.add_done_callback(start_polling)


def _swap_callback(task: asyncio.Task[None] | None, old: Callable[[asyncio.Task[None]], None],
                   new: Callable[[asyncio.Task[None]], None]) -> None:
    if task is not None and task.remove_done_callback(old):
        task.add_done_callback(new)


async def _until(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether `condition` held within `seconds` (looked at every 0.2 s)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


def schedules(cron: list[str], interval: list[str], full_resync_cron: str | None,
              timezone: str) -> list[Schedule]:
    """Incremental schedules, plus an optional full resync on its own cron (its parameters
    are merged over the deployment's)."""
    out: list[Schedule] = [Cron(c, timezone=timezone) for c in cron]
    out += [Interval(parse_duration(i), timezone=timezone) for i in interval]
    if full_resync_cron:
        out.append(Cron(full_resync_cron, timezone=timezone,
                        parameters={"mode": "full_resync"}))
    return out


def build(folder: Path, *, per_folder: bool, scheds: list[Schedule],
          params: dict[str, Any], tags: list[str]) -> list[RunnerDeployment]:
    """The deployments of a folder. Integration paths are absolute, so runs do not depend on
    the directory the server was started in."""
    folder = folder.resolve()
    common: dict[str, Any] = {"schedules": scheds, "tags": ["engage-sync", *tags],
                              "entrypoint_type": EntrypointType.MODULE_PATH}
    # `to_deployment` is sync-compatible: called outside an event loop it returns the
    # deployment itself, which its annotation (deployment or coroutine) does not say.
    if per_folder:
        return [cast(RunnerDeployment, sync_folder.to_deployment(
            name=folder.name, parameters={"folder": str(folder), **params},
            description=f"every integration of {folder}", **common))]
    files = integration_files(folder)
    if not files:
        raise SystemExit(f"serve.py: no integration files (*.yaml) in {folder}")
    return [cast(RunnerDeployment, sync_integration.to_deployment(
        name=path.stem, parameters={"integration": str(path), **params},
        description=f"integration {path.name} of {folder}", **common)) for path in files]


def _param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: write KEY=VALUE")
    return key, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="folder of integration files")
    parser.add_argument("--per-folder", action="store_true",
                        help="one deployment for the folder instead of one per file")
    parser.add_argument("--cron", action="append", default=[],
                        help="incremental schedule, e.g. '*/15 * * * *' (repeatable)")
    parser.add_argument("--interval", action="append", default=[],
                        help="incremental schedule as an interval, e.g. 5m (repeatable)")
    parser.add_argument("--full-resync-cron", default=None,
                        help="a second schedule running mode=full_resync, e.g. '0 3 * * sun'")
    parser.add_argument("--timezone", default="UTC", help="time zone of the cron schedules")
    parser.add_argument("--state-url", default=None,
                        help="state database for every run (default ENGAGE_SYNC_STATE_URL "
                             "of this process's environment)")
    parser.add_argument("--param", type=_param, action="append", default=[],
                        help="default parameter KEY=VALUE of every deployment (repeatable)")
    parser.add_argument("--tag", action="append", default=[], help="extra deployment tag")
    parser.add_argument("--limit", type=int, default=None,
                        help=f"flow runs at once in this process; 0: no limit (default "
                             f"{LIMIT_ENV}, else one per CPU, at most {LIMIT_CAP})")
    parser.add_argument("--poll", type=float, default=None,
                        help="seconds between polls for due runs (default "
                             "PREFECT_RUNNER_POLL_FREQUENCY, 10)")
    args = parser.parse_args(argv)
    telemetry.turn_off()  # the flow runs it starts inherit it
    params = dict(args.param)
    if args.state_url:
        params["state_url"] = args.state_url
    deployments = build(args.folder, per_folder=args.per_folder,
                        scheds=schedules(args.cron, args.interval, args.full_resync_cron,
                                         args.timezone),
                        params=params, tags=args.tag)
    limit = serve_limit(args.limit)
    print(f"serving {len(deployments)} deployment(s), "
          f"{f'at most {limit}' if limit else 'any number of'} flow runs at once: "
          + ", ".join(f"{d.flow_name}/{d.name}" for d in deployments), file=sys.stderr)
    kwargs: dict[str, Any] = {"query_seconds": args.poll} if args.poll else {}
    runner = StoppingRunner(limit=limit, **kwargs)
    runner.listen()
    try:
        for deployment in deployments:
            runner.add_deployment(deployment)
        asyncio.run(runner.start())
    except KeyboardInterrupt:  # Ctrl-C before serving began: nothing runs yet
        raise SystemExit("serve.py: interrupted while registering the deployments") from None


if __name__ == "__main__":
    main()
