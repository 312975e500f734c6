"""`engage-sync`: run integrations, inspect status and errors, start the demo or the sandbox.

Integrations are named by file path or by name (looked up as `<config dir>/<name>.yaml`). The
state database is `--state-url`, else `ENGAGE_SYNC_STATE_URL`, else a local SQLite file.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from datetime import UTC
from pathlib import Path
from typing import Any

from engage_sync.adapters import gc_tuning, telemetry
from engage_sync.adapters.failures import expected, one_line
from engage_sync.cli import dbt_run, guards
from engage_sync.cli.logging_setup import configure
from engage_sync.errors import SKIPPED, RunInProgress, RunStopped, SyncError


def resolve_integration(name_or_path: str, config_dir: str) -> Path:
    """An integration file path, or `<config dir>/<name>.yaml`; raises ConfigError."""
    from engage_sync.config.files import resolve_integration as resolve

    return resolve(name_or_path, config_dir)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _prefect_server() -> None:
    """Before Prefect is imported: a Prefect server for this run when PREFECT_API_URL is not
    set (`local_server`: found, or started in the background and said so), else say why the
    run takes 10-20 s longer."""
    from engage_sync.cli.local_server import use_local_server

    if os.environ.get("PREFECT_API_URL") or use_local_server(
            lambda line: print(f"engage-sync: {line}", file=sys.stderr)):
        return
    logging.getLogger("engage_sync.cli.main").info(
        "PREFECT_API_URL is not set: Prefect starts a temporary server for this run "
        "(10-20 s). Start one with `prefect server start` and export PREFECT_API_URL, "
        "or run with --no-prefect")


EXIT_IN_PROGRESS = 75  # EX_TEMPFAIL: another process runs the integration; try again later


def cmd_run(args: argparse.Namespace) -> int:
    gc_tuning.raise_threshold()  # from the start, imports and all, as its sync has it
    path = resolve_integration(args.integration, args.config_dir)
    if args.no_prefect:  # Prefect is not even imported
        from engage_sync.adapters.wiring import run_direct
        from engage_sync.config.run_options import run_options

        result: Any = run_direct(path, run_options(
            args.mode, args.start, args.end, args.dry_run, args.resend_events,
            args.allow_deletes, args.partitions, args.send_whole, args.accept_schema,
            args.allow_points),
            args.state_url)
    else:
        _prefect_server()
        from engage_sync.adapters.flows import sync_flow

        result = sync_flow(
            str(path), mode=args.mode, start=args.start, end=args.end, dry_run=args.dry_run,
            resend_events=args.resend_events, allow_deletes=args.allow_deletes,
            state_url=args.state_url, partitions=args.partitions, send_whole=args.send_whole,
            accept_schema=args.accept_schema, allow_points=args.allow_points)
    if isinstance(result, dict) and SKIPPED in result:  # the flow's form of RunInProgress
        raise RunInProgress(result[SKIPPED])  # said and exited as `--no-prefect` does (main)
    _print_json(result)
    return 0 if not isinstance(result, dict) or result.get("job_status") != "error" else 1


def cmd_status(args: argparse.Namespace) -> int:
    from engage_sync.adapters.wiring import open_state
    from engage_sync.status.record import InvalidCursor, page

    store = open_state(args.state_url)
    name = Path(args.integration).stem
    try:
        result = page(store, name, args.cursor)
    except InvalidCursor:
        print("Invalid cursor", file=sys.stderr)
        return 2
    out: dict[str, Any] = result.body()
    out["prev_cursor"], out["next_cursor"] = result.prev_cursor, result.next_cursor
    _print_json(out)
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    from engage_sync.adapters.wiring import open_state

    name = Path(args.integration).stem
    users = open_state(args.state_url).forget_fields(name)
    print(f"integration {name}: forgot the attribute digests of {users} users; every row its "
          "next runs read is sent whole (run it with --mode full_resync to send every row now)")
    return 0


def cmd_errors(args: argparse.Namespace) -> int:
    from engage_sync.adapters.wiring import open_state
    from engage_sync.status.record import shown_key

    store = open_state(args.state_url)
    name, partition = _errors_of(args.integration)
    rows = store.errors(name, limit=args.limit, partition=partition)
    if not rows:
        print("no rejected or failed rows recorded")
        return 0
    keys = [shown_key(row["row_key"]) for row in rows]
    notes = _retry_notes(store, rows)
    width = min(max(len("ROW KEY"), *map(len, keys)), 40)
    note_width = max(len("RETRY"), *map(len, notes))
    partitioned = any(row.get("partition") for row in rows)  # a column only then
    parts = [f"{row.get('partition') or '-':<9} " if partitioned else "" for row in rows]
    print(f"{'RECORDED (UTC)':<19}  {'KIND':<9} {'PARTITION ' if partitioned else ''}"
          f"{'ROW KEY':<{width}}  {'RETRY':<{note_width}}  REASON")
    for row, key, note, part in zip(rows, keys, notes, parts, strict=True):
        at = row["recorded_at"]
        at = at.astimezone(UTC) if at.tzinfo is not None else at  # naive: stored in UTC
        print(f"{at:%Y-%m-%d %H:%M:%S}  {row['kind']:<9} {part}"
              f"{key:<{width}}  {note:<{note_width}}  {row['reason']}")
    return 0


def _errors_of(integration: str) -> tuple[str, str | None]:
    """(integration name, partition `k/N` or None) of what `errors` was given: a file path or
    a name, or a partition's run name `<integration>#k/N` (never cut to a file stem)."""
    from engage_sync.config import partition_names

    parsed = partition_names.parse(integration)
    if parsed is None:
        return Path(integration).stem, None
    own = integration.removesuffix(partition_names.suffix(*parsed))
    return Path(own).stem, partition_names.label(*parsed)


def _retry_notes(store: Any, rows: list[dict[str, Any]]) -> list[str]:
    """What became of each failed or in-doubt row's request (sent again, parked), or '-'."""
    from engage_sync.state.retries import retry_note
    from engage_sync.state.row_errors import request_of

    states = store.retry_states([row["run_id"] for row in rows])
    notes = []
    for row in rows:
        found = states.get((row["run_id"], request_of(row["position"]) or -1))
        notes.append(retry_note(*found) if found else "-")
    return notes


def cmd_backfill(args: argparse.Namespace) -> int:
    from engage_sync.cli import backfill
    from engage_sync.cli.deployment_source import integration_for

    deployment = args.deployment or f"engage-sync/{Path(args.integration).stem}"
    path = integration_for(args.integration, args.config_dir, deployment)
    start = backfill.parse_bound(args.start, is_end=False)
    end = backfill.parse_bound(args.end, is_end=True)
    chunks = backfill.plan(start, end, args.chunk)
    print(f"backfill {path.stem}: [{start.isoformat()}, {end.isoformat()}) in {len(chunks)} "
          f"chunks of at most {args.chunk}", file=sys.stderr)
    if args.dry_run:
        rows = backfill.dry_run(str(path), chunks, resend_events=args.resend_events,
                                state_url=args.state_url, send_whole=args.send_whole,
                                report=lambda line: print(line, file=sys.stderr))
        _print_json({"integration": path.stem, "dry_run": True,
                     **backfill.dry_run_totals(rows), "chunks": rows})
        return 0
    summary = backfill.run_backfill(
        path.stem, chunks, deployment=deployment,
        resend_events=args.resend_events, label=args.label, retry_failed=args.retry_failed,
        chunk_timeout=args.chunk_timeout, report=lambda line: print(line, file=sys.stderr),
        partitions=args.partitions, send_whole=args.send_whole)
    _print_json(summary.as_dict())
    return 0 if summary.stopped is None else 1


def cmd_status_server(args: argparse.Namespace) -> int:
    from engage_sync.adapters.status_server import serve
    from engage_sync.adapters.wiring import open_state

    serve(lambda: open_state(args.state_url), host=args.host, port=args.port,
          config_dir=args.config_dir)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from engage_sync.adapters.wiring import open_state
    from engage_sync.state import retention

    age = retention.retention(args.older_than)
    deleted = retention.prune(open_state(args.state_url), age)
    print(f"pruned {deleted} rejected/failed row records older than {age}; run records kept")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    _prefect_server()
    from engage_sync.demo.main import run_demo

    return run_demo(Path(args.workdir), port=args.port)


def cmd_sandbox(args: argparse.Namespace) -> int:
    """The sandbox, a separate program, replaces this process on POSIX (exec): SIGTERM and
    Ctrl-C reach the server itself, which frees its port; no child is left to keep it."""
    argv = [sys.executable, "-m", "engage_sandbox.cli", *args.rest]
    if os.name != "posix":
        return subprocess.call(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
    return 0  # not reached: execv returns only by raising


def _bound(*, is_end: bool) -> Any:
    def parse(text: str) -> Any:
        from engage_sync.cli.backfill import parse_bound

        try:
            return parse_bound(text, is_end=is_end)
        except SyncError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engage-sync", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("ENGAGE_SYNC_LOG_LEVEL", "INFO"))
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks of expected failures (bad config, missing table, "
                             "refused key...), not only their one-line message")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_status_and_errors, _add_backfill, _add_operations, guards.add_trace):
        add(sub)
    dbt_run.add_commands(sub)  # plan, dbt-exposures
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("integration", help="integration file, or name in the config folder")
    p.add_argument("--config-dir", default=os.environ.get("ENGAGE_SYNC_CONFIG_DIR", "config"))
    p.add_argument("--state-url", default=None, help="SQLAlchemy URL of the state database")


def _add_run(sub: Any) -> None:
    run = sub.add_parser("run", help="sync one integration now (a Prefect flow run)")
    _common(run)
    run.add_argument("--mode", choices=["incremental", "backfill", "full_resync"],
                     default="incremental",
                     help="incremental (from the stored cursor), backfill (--start/--end) or "
                          "full_resync (every row); all three diff attributes against the "
                          "field record and bill only what changed (see --send-whole)")
    run.add_argument("--start", type=_bound(is_end=False), default=None,
                     help="backfill: first UPDATED_AT included (date or ISO datetime, UTC)")
    run.add_argument("--end", type=_bound(is_end=True), default=None,
                     help="backfill: end of the range, excluded (a date includes that whole day)")
    run.add_argument("--resend-events", action="store_true",
                     help="backfill: send events the incremental sync already delivered")
    run.add_argument("--allow-deletes", type=int, default=None, metavar="N",
                     help="deletes: allow up to N deletions in this run (above max_deletes)")
    guards.add_run_guards(run)
    run.add_argument("--partitions", type=int, default=None, metavar="N",
                     help="run in N partitions by a hash of the user key (default: `partitions`)")
    _send_whole(run)
    run.add_argument("--accept-schema", action="store_true",
                     help="accept a changed type of a mapped column or payload key (a run "
                          "stops before sending anything when one changed since the last run)")
    run.add_argument("--dry-run", action="store_true",
                     help="read, validate and batch; print what would be sent; send nothing")
    run.add_argument("--no-prefect", action="store_true",
                     help="run the pipeline directly, without a Prefect flow run")
    dbt_run.add_flags(run, cmd_run, _prefect_server)  # and a folder, picked by dbt


def _add_status_and_errors(sub: Any) -> None:
    status = sub.add_parser("status", help="sync status records, 10 a page, newest first")
    _common(status)
    status.add_argument("--cursor", default=None)
    status.set_defaults(func=cmd_status)

    forget = sub.add_parser(
        "forget", help="forget which attribute values the service acknowledged (field diff)",
        description="Drop the integration's field record, for when the service's profiles "
        "were changed by other writers: the rows its next runs read are sent whole.")
    _common(forget)
    forget.set_defaults(func=cmd_forget)

    errors = sub.add_parser("errors", help="rejected and failed rows with their reasons")
    _common(errors)
    errors.add_argument("--limit", type=int, default=100)
    errors.set_defaults(func=cmd_errors)


def _send_whole(p: argparse.ArgumentParser) -> None:
    p.add_argument("--send-whole", action="store_true",
                   help="send every attribute object read whole, not only what differs from "
                        "the field record (every mode diffs by default, backfills and full "
                        "resyncs too): for when the service's profiles drifted")


def _add_backfill(sub: Any) -> None:
    bf = sub.add_parser(
        "backfill", help="re-send a range of rows, one Prefect flow run per chunk",
        description="Re-send rows whose UPDATED_AT falls in [--start, --end), chunk by chunk. "
        "Each chunk is one run of the integration's deployment (served by "
        "deployments/serve.py or a worker), created once: repeating the command creates no "
        "run for a chunk that has one, and resumes at the first chunk not completed.")
    _common(bf)
    bf.add_argument("--start", required=True, help="first day or datetime included (UTC)")
    bf.add_argument("--end", required=True,
                    help="last day included, or a datetime excluded (UTC)")
    bf.add_argument("--chunk", default="1d", help="chunk length: 1h, 1d, 7d, ... (default 1d)")
    bf.add_argument("--dry-run", action="store_true",
                    help="print what each chunk's run would do (rows read, requests, data "
                         "points, with --send-whole too); create no run, send nothing")
    bf.add_argument("--resend-events", action="store_true",
                    help="send again events and purchases the incremental sync delivered")
    _send_whole(bf)
    bf.add_argument("--deployment", default=None,
                    help="deployment that runs the chunks (default engage-sync/<integration>)")
    bf.add_argument("--label", default=None,
                    help="a new label makes a new set of runs for a range already backfilled")
    bf.add_argument("--retry-failed", action="store_true",
                    help="run a failed chunk again (the same flow run, set back to Scheduled)")
    bf.add_argument("--partitions", type=int, default=None, metavar="N",
                    help="run each chunk in N partitions (default: the integration's)")
    bf.add_argument("--chunk-timeout", type=float, default=3600.0,
                    help="seconds to wait for one chunk before stopping (resume by repeating)")
    bf.set_defaults(func=cmd_backfill)


def _add_operations(sub: Any) -> None:
    """status-server, prune, demo, sandbox."""
    server = sub.add_parser(
        "status-server", help="serve the service's /cdi/integrations endpoints over HTTP",
        description="The service's job sync status, integrations list and sync trigger "
        "(/cdi/integrations...) and /metrics over the state database, behind "
        "'Authorization: Bearer $ENGAGE_SYNC_STATUS_TOKEN'.")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=8788)
    server.add_argument("--config-dir", default=os.environ.get("ENGAGE_SYNC_CONFIG_DIR", "config"),
                        help="the integration files listed and started (runs in this process)")
    server.add_argument("--state-url", default=None)
    server.set_defaults(func=cmd_status_server)
    prune = sub.add_parser("prune", help="delete rejected/failed row records older than an age")
    prune.add_argument("--older-than", default=None,
                       help="age such as 30d or 12h (default ENGAGE_SYNC_ERRORS_RETENTION or 30d)")
    prune.add_argument("--state-url", default=None)
    prune.set_defaults(func=cmd_prune)
    demo = sub.add_parser("demo", help="sample warehouse + sandbox + two flow runs")
    demo.add_argument("--workdir", default="demo-output")
    demo.add_argument("--port", type=int, default=0, help="sandbox port (0: a free one)")
    demo.set_defaults(func=cmd_demo)
    sandbox = sub.add_parser("sandbox", help="start the sandbox (see engage-sandbox --help)")
    sandbox.add_argument("rest", nargs=argparse.REMAINDER)
    sandbox.set_defaults(func=cmd_sandbox)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    telemetry.turn_off()  # before Prefect reads its settings or starts a temporary server
    if argv[:1] == ["sandbox"]:  # every option after `sandbox` is the sandbox's own
        return cmd_sandbox(argparse.Namespace(rest=argv[1:]))
    args = build_parser().parse_args(argv)
    configure(args.log_level, debug=args.debug)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `engage-sync status ... | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except RunInProgress as exc:  # another process runs it: try again later
        print(f"engage-sync: {one_line(exc)}", file=sys.stderr)
        return EXIT_IN_PROGRESS
    except RunStopped as exc:  # SIGTERM: stopped resumable, and says so
        from engage_sync.adapters.stop_signal import EXIT_STOPPED

        print(f"engage-sync: {one_line(exc)}", file=sys.stderr)
        return EXIT_STOPPED
    except Exception as exc:
        if args.debug or not expected(exc):
            raise
        print(f"engage-sync: {one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
