"""Integration files joined to the dbt models they read, and a dbt run's verdict on each.

The seam between the pure `engage_sync.dbt` package and the files: artifacts read from disk
(or handed in as parsed JSON by the dbt Cloud webhook), each integration placed on its node.

Invariants:
- an integration's node is the model `dbt.model` names, else the one relation whose table
  is `source.table` (with `source.schema` when given); a named model the manifest lacks, or a
  table two relations share, is a ConfigError naming the file and the key (`dbt.model`,
  `source.table`), never a guess; a table no relation has means the integration reads no dbt
  model (it is selected by no selector and held back by no dbt run);
- a skip is recorded as a finished run of the integration with `job_status` `error` (the
  service's word for a run that synced no row) whose message starts `skipped:` and names the
  model and the culprit; nothing is read or sent and no cursor moves, so the record shows
  the skip without passing for a sync.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engage_sync.config.files import integration_files, load_integration
from engage_sync.config.integration import Integration
from engage_sync.dbt.manifest import Manifest, ManifestError, parse_manifest
from engage_sync.dbt.run_results import RunResults, held_back, parse_run_results
from engage_sync.errors import ConfigError
from engage_sync.run.folder import run_order
from engage_sync.state.store import StateStore

SKIPPED_PREFIX = "skipped: "


@dataclass(frozen=True)
class Placed:
    """An integration file, its model and the model's unique id (None: no dbt model)."""

    path: Path
    integration: Integration
    unique_id: str | None

    @property
    def name(self) -> str:
        return self.integration.name


def _json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read dbt's {what} {path} ({exc.strerror}); build the "
                          "project first (dbt build) or pass its path") from None
    except ValueError:
        raise ConfigError(f"dbt's {what} {path} is not JSON") from None


def read_manifest(path: str | Path) -> Manifest:
    return manifest_from(_json(Path(path), "manifest"), str(path))


def manifest_from(raw: Any, where: str) -> Manifest:
    try:
        return parse_manifest(raw)
    except ManifestError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def read_run_results(path: str | Path) -> RunResults:
    return run_results_from(_json(Path(path), "run results"), str(path))


def run_results_from(raw: Any, where: str) -> RunResults:
    try:
        return parse_run_results(raw)
    except ManifestError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def node_of(integration: Integration, manifest: Manifest, file: str) -> str | None:
    """The unique id of the node the integration reads, or None when it reads no dbt model."""
    if integration.dbt is not None:
        try:
            return manifest.model_named(integration.dbt.model).unique_id
        except ManifestError as exc:
            raise ConfigError(f"{exc}; name a model of the dbt project", file=file,
                              key="dbt.model") from None
    table = integration.source.table
    if table is None:  # a query: which model it reads is not parsed
        return None
    found = manifest.for_table(table, integration.source.schema_name)
    if len(found) > 1:
        names = ", ".join(sorted(n.name for n in found))
        raise ConfigError(f"the table matches {len(found)} dbt relations ({names}); name "
                          "the model in `dbt: {model: NAME}`", file=file, key="source.table")
    return found[0].unique_id if found else None


def place_folder(folder: str | Path, manifest: Manifest) -> list[Placed]:
    """Every integration file of the folder in run order, on its node. A file that does not
    load, or whose model cannot be told, raises its ConfigError (naming file and key)."""
    placed = []
    for path in run_order(integration_files(folder)):
        integration = load_integration(path)
        placed.append(Placed(path, integration, node_of(integration, manifest, str(path))))
    return placed


def skip_reason(placed: Placed, manifest: Manifest, results: RunResults) -> str | None:
    """Why the integration must not run after this dbt run, or None."""
    if placed.unique_id is None:
        return None
    return held_back(manifest, results, placed.unique_id)


def record_skip(store: StateStore, placed: Placed, reason: str) -> str:
    """Record the skip as the integration's run (see the module's invariants); the line."""
    message = f"{SKIPPED_PREFIX}{reason}; nothing was read or sent"
    run_id = store.open_run(placed.name, "incremental", None, None, job_status="error",
                            message=message)
    store.finish_run(run_id, "error", message=message)
    return f"integration {placed.name} {message}"
