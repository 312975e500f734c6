"""Serve engage-sync deployments to a Prefect server: one per integration file of a folder, or one
for the whole folder. No work pool needed; keep this process running (a systemd unit, a
container); stopping it pauses the deployments' schedules.

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
import signal
import sys
from pathlib import Path
from typing import Any

import yaml
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.exceptions import TerminationSignal
from prefect.runner import Runner
from prefect.schedules import Cron, Interval, Schedule

from engage_sync.adapters import telemetry
from engage_sync.adapters.flows import sync_folder, sync_integration
from engage_sync.config.files import integration_files
from engage_sync.config.integration import parse_duration

PAUSE_SECONDS = 6.0  # at shutdown, how long pausing the schedules may wait for the server
# (a busy server on SQLite took over 2 s to answer in CI; within the 10 s a container gets)


class StoppingRunner(Runner):
    """Prefect's Runner, stopping within seconds on SIGTERM or SIGINT even when the Prefect
    server is gone: pausing the schedules at shutdown waits PAUSE_SECONDS at most (Prefect's
    own runner retries for minutes), and SIGINT takes the same path as SIGTERM."""

    async def _pause_schedules(self) -> None:
        try:
            await asyncio.wait_for(super()._pause_schedules(), PAUSE_SECONDS)
        except (TimeoutError, OSError, RuntimeError) as exc:  # the server did not answer
            self._logger.warning("schedules not paused (the Prefect server did not answer in "
                                 "%s s: %s); pause them in the UI if they should stop",
                                 PAUSE_SECONDS, type(exc).__name__)

    def handle_sigterm(self, signum: Any = None, *args: Any, **kwargs: Any) -> None:
        # Prefect's own handler calls a stop() that, inside the event loop, only makes a
        # coroutine nobody awaits (a RuntimeWarning); SystemExit alone unwinds the runner.
        self._logger.info("signal %s received, stopping", signum)
        sys.exit(0)

    async def start(self, run_once: bool = False, webserver: bool | None = None) -> None:
        signal.signal(signal.SIGINT, self.handle_sigterm)
        await super().start(run_once=run_once, webserver=webserver)


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
    if per_folder:
        return [sync_folder.to_deployment(
            name=folder.name, parameters={"folder": str(folder), **params},
            description=f"every integration of {folder}", **common)]
    files = integration_files(folder)
    if not files:
        raise SystemExit(f"serve.py: no integration files (*.yaml) in {folder}")
    return [sync_integration.to_deployment(
        name=path.stem, parameters={"integration": str(path), **params},
        description=f"integration {path.name} of {folder}", **common) for path in files]


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
                        help="flow runs at once in this process (default: no limit)")
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
    print(f"serving {len(deployments)} deployment(s): "
          + ", ".join(f"{d.flow_name}/{d.name}" for d in deployments), file=sys.stderr)
    kwargs: dict[str, Any] = {"query_seconds": args.poll} if args.poll else {}
    runner = StoppingRunner(limit=args.limit, **kwargs)
    for deployment in deployments:
        runner.add_deployment(deployment)
    with contextlib.suppress(KeyboardInterrupt, TerminationSignal):
        asyncio.run(runner.start())


if __name__ == "__main__":
    main()
