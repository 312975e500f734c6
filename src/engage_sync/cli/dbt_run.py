"""`engage-sync run FOLDER [--select SELECTORS] [--after run_results.json]`: the integrations of
a folder picked by dbt's selectors from its manifest, and held back after a failed dbt run.

Invariants:
- selection and skips are decided before any integration runs, from the files and the
  artifacts alone; a file that does not load or whose model cannot be told stops the command
  before anything runs (its ConfigError names the file and key);
- each integration held back by `--after` leaves one record (`adapters/dbt_models.record_skip`)
  and one line on stderr, and is neither read nor sent; the others run in the folder's run
  order, one at a time, each as `engage-sync run FILE` runs it;
- the exit status is that of the runs: 0 when none ended in `error`, 1 when one did, 2 when
  one stopped on a failure it names in one line (75 when another process runs one); a skip
  alone does not fail the command: it is what `--after` is for, and its record says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engage_sync.cli import dbt_exposures, plan
from engage_sync.dbt.manifest import DEFAULT_MANIFEST
from engage_sync.deliver.definitions import DefinitionsCache
from engage_sync.errors import SKIPPED, ConfigError, RunInProgress


def add_commands(sub: Any) -> None:
    """The commands that read a folder against dbt or Git: `plan`, `dbt-exposures`."""
    plan.add_parser(sub)
    dbt_exposures.add_parser(sub)


def add_flags(run: argparse.ArgumentParser, single: Callable[[argparse.Namespace], int],
              before_prefect: Callable[[], None]) -> None:
    """The dbt options of `engage-sync run`; a folder is run here, a file by `single`."""
    run.add_argument("--select", default=None, metavar="SELECTORS",
                     help="with a folder: run the integrations whose dbt model matches "
                          "tag:NAME, model:NAME or path:GLOB (comma- or space-separated, a "
                          "union), from dbt's manifest")
    run.add_argument("--after", default=None, metavar="RUN_RESULTS",
                     help="with a folder: skip (one line and a record each) the integrations "
                          "whose dbt model or any of its parents failed or was skipped in "
                          "that dbt run (its target/run_results.json); run the rest")
    run.add_argument("--manifest", default=None, metavar="PATH",
                     help="dbt's manifest.json (default: target/manifest.json of "
                          "--dbt-project)")
    run.add_argument("--dbt-project", default=os.environ.get("ENGAGE_SYNC_DBT_PROJECT", "."),
                     metavar="DIR", help="the dbt project's folder (default: "
                                         "ENGAGE_SYNC_DBT_PROJECT, else the current one)")
    run.set_defaults(func=lambda args: run_folder(args, before_prefect) if wants_folder(args)
                     else single(args))


def wants_folder(args: argparse.Namespace) -> bool:
    return bool(args.select or args.after) or Path(args.integration).is_dir()


def manifest_path(args: argparse.Namespace) -> Path:
    return Path(args.manifest) if args.manifest else Path(args.dbt_project) / DEFAULT_MANIFEST


def run_folder(args: argparse.Namespace, before_prefect: Callable[[], None]) -> int:
    """Pick, skip, run; print the records as one JSON object; return the exit status."""
    from engage_sync.adapters import dbt_models, gc_tuning
    from engage_sync.adapters.wiring import open_state
    from engage_sync.config.files import integration_files
    from engage_sync.dbt.selection import SelectorError, parse_selectors, selected
    from engage_sync.run.folder import run_order

    gc_tuning.raise_threshold()  # as `engage-sync run FILE` does
    folder = Path(args.integration)
    if not folder.is_dir():
        raise ConfigError(f"--select and --after pick integrations of a folder; {folder} is "
                          "not one (give the folder of integration files)")
    skips: dict[str, str] = {}
    if not (args.select or args.after):
        paths = run_order(integration_files(folder))
    else:
        manifest = dbt_models.read_manifest(manifest_path(args))
        placed = dbt_models.place_folder(folder, manifest)
        if args.select:
            try:
                wanted = selected(manifest, parse_selectors(args.select))
            except SelectorError as exc:
                raise ConfigError(f"--select: {exc}") from None
            placed = [p for p in placed if p.unique_id in wanted]
        if args.after:
            results = dbt_models.read_run_results(args.after)
            store = open_state(args.state_url)
            kept = []
            for p in placed:
                reason = dbt_models.skip_reason(p, manifest, results)
                if reason is None:
                    kept.append(p)
                else:
                    skips[p.name] = reason
                    print(f"engage-sync: {dbt_models.record_skip(store, p, reason)}",
                          file=sys.stderr)
            placed = kept
        paths = [p.path for p in placed]
    if not paths and not skips:
        print(f"engage-sync: no integration of {folder} selected", file=sys.stderr)
    if paths and not args.no_prefect:
        before_prefect()
    return _run_all(args, paths, skips)


def _run_all(args: argparse.Namespace, paths: list[Path], skips: dict[str, str]) -> int:
    from engage_sync.adapters.failures import expected, one_line

    definitions = DefinitionsCache()  # the workspace's attribute definitions, read once
    records: dict[str, Any] = {}
    code = 0
    for path in paths:
        try:
            result = _run_one(args, path, definitions)
        except RunInProgress as exc:
            print(f"engage-sync: {one_line(exc)}", file=sys.stderr)
            code = max(code, 75)
            continue
        except Exception as exc:
            if args.debug or not expected(exc):
                raise
            print(f"engage-sync: {one_line(exc, path.stem)}", file=sys.stderr)
            code = max(code, 2)
            continue
        records[path.stem] = result
        if isinstance(result, dict) and result.get("job_status") == "error":
            code = max(code, 1)
    print(json.dumps({"runs": records, "skipped": skips}, indent=2, default=str))
    return code


def _run_one(args: argparse.Namespace, path: Path, definitions: DefinitionsCache) -> Any:
    """One integration as `engage-sync run FILE` runs it: a flow run, or `--no-prefect` (then
    sharing the folder's `definitions`; a flow run reads its own)."""
    from engage_sync.config.run_options import run_options

    options = run_options(args.mode, args.start, args.end, args.dry_run, args.resend_events,
                          args.allow_deletes, args.partitions, args.send_whole,
                          args.accept_schema, args.allow_points)
    if args.no_prefect:
        from engage_sync.adapters.wiring import run_direct

        return run_direct(path, options, args.state_url, definitions)
    from engage_sync.adapters.flows import sync_flow

    result = sync_flow(
        str(path), mode=args.mode, start=args.start, end=args.end, dry_run=args.dry_run,
        resend_events=args.resend_events, allow_deletes=args.allow_deletes,
        state_url=args.state_url, partitions=args.partitions, send_whole=args.send_whole,
        accept_schema=args.accept_schema, allow_points=args.allow_points)
    if isinstance(result, dict) and SKIPPED in result:
        raise RunInProgress(result[SKIPPED])
    return result

