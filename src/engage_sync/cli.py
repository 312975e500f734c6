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
from pathlib import Path
from typing import Any

from engage_sync.errors import SyncError


def resolve_integration(name_or_path: str, config_dir: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    candidate = Path(config_dir) / f"{name_or_path}.yaml"
    if not candidate.exists():
        raise SyncError(
            f"no integration '{name_or_path}': give a file path or a name with a file "
            f"{candidate} (the folder is --config-dir or ENGAGE_SYNC_CONFIG_DIR)"
        )
    return candidate


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def cmd_run(args: argparse.Namespace) -> int:
    from engage_sync.flows import sync_flow_or_direct

    path = resolve_integration(args.integration, args.config_dir)
    result = sync_flow_or_direct(
        str(path), mode=args.mode, dry_run=args.dry_run, state_url=args.state_url,
        use_prefect=not args.no_prefect,
    )
    _print_json(result)
    return 0 if not isinstance(result, dict) or result.get("job_status") != "error" else 1


def cmd_status(args: argparse.Namespace) -> int:
    from engage_sync.runner import open_state
    from engage_sync.status import InvalidCursor, page

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


def cmd_errors(args: argparse.Namespace) -> int:
    from engage_sync.runner import open_state

    store = open_state(args.state_url)
    rows = store.errors(Path(args.integration).stem, limit=args.limit)
    for row in rows:
        print(f"{row['recorded_at']:%Y-%m-%d %H:%M:%S}  {row['kind']:<9} "
              f"{row['row_key']}  {row['reason']}")
    if not rows:
        print("no rejected or failed rows recorded")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from engage_sync.demo import run_demo

    return run_demo(Path(args.workdir), port=args.port)


def cmd_sandbox(args: argparse.Namespace) -> int:
    # The sandbox is a separate program (engage_sync never imports engage_sandbox).
    return subprocess.call([sys.executable, "-m", "engage_sandbox.cli", *args.rest])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engage-sync", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("ENGAGE_SYNC_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("integration", help="integration file, or name in the config folder")
        p.add_argument("--config-dir", default=os.environ.get("ENGAGE_SYNC_CONFIG_DIR", "config"))
        p.add_argument("--state-url", default=None, help="SQLAlchemy URL of the state database")

    run = sub.add_parser("run", help="sync one integration now (a Prefect flow run)")
    common(run)
    run.add_argument("--mode", choices=["incremental", "full_resync"], default="incremental")
    run.add_argument("--dry-run", action="store_true",
                     help="read, validate and batch; print what would be sent; send nothing")
    run.add_argument("--no-prefect", action="store_true",
                     help="run the pipeline directly, without a Prefect flow run")
    run.set_defaults(func=cmd_run)

    status = sub.add_parser("status", help="sync status records, 10 a page, newest first")
    common(status)
    status.add_argument("--cursor", default=None)
    status.set_defaults(func=cmd_status)

    errors = sub.add_parser("errors", help="rejected and failed rows with their reasons")
    common(errors)
    errors.add_argument("--limit", type=int, default=100)
    errors.set_defaults(func=cmd_errors)

    demo = sub.add_parser("demo", help="sample warehouse + sandbox + two flow runs")
    demo.add_argument("--workdir", default="demo-output")
    demo.add_argument("--port", type=int, default=0, help="sandbox port (0: a free one)")
    demo.set_defaults(func=cmd_demo)

    sandbox = sub.add_parser("sandbox", help="start the sandbox (see engage-sandbox --help)")
    sandbox.add_argument("rest", nargs=argparse.REMAINDER)
    sandbox.set_defaults(func=cmd_sandbox)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except SyncError as exc:
        print(f"engage-sync: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
