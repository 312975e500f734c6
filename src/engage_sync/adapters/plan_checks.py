"""The checks `engage-sync plan` makes of one changed integration file against the world: the
points its next run would bill (the dry run), the attributes the workspace does not define or
defines with another type, and the caps that run would pass.

Invariants:
- nothing is sent to `/users/track` and nothing is recorded: the points come from the dry
  run (`run/dry_run.py`: the next window as it reads now, diffed against the field record),
  the workspace's definitions from `GET /custom_attributes` (every page, read once a plan per
  service URL and key: `deliver/definitions.py`, its pager and cache), the column types
  from the warehouse's metadata;
- a check that cannot be made (no key in the environment, the service or the warehouse out
  of reach) is said as one line in the report, never a guess and never a crash of the plan;
  no key, password or value is ever in a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engage_sync import kinds
from engage_sync.adapters.failures import one_line
from engage_sync.adapters.resources import http_transport, service_key, warehouse_engine
from engage_sync.adapters.wiring import sync_file
from engage_sync.config.file_diff import attributes_of
from engage_sync.config.integration import Integration
from engage_sync.config.run_options import RunOptions
from engage_sync.deliver.definitions import PATH, Definitions, DefinitionsCache, get_page
from engage_sync.errors import SyncError
from engage_sync.read import duckdb_turns
from engage_sync.read.plan import RunPlan, prepare
from engage_sync.read.source_schema import describe
from engage_sync.state.store import StateStore

_TYPES = (  # the column's type text → the service's data_type
    (re.compile(r"\[\]$|^ARRAY|^LIST"), "Array"),
    (re.compile(r"^BOOL"), "Boolean"),
    (re.compile(r"^(TINY|SMALL|BIG|HUGE|U)?INT|^DECIMAL|^NUMERIC|^NUMBER|^FLOAT|^DOUBLE|^REAL"),
     "Number"),
    (re.compile(r"^TIMESTAMP|^DATE|^TIME"), "Time"),
    (re.compile(r"^N?(VAR)?CHAR|^TEXT|^STRING|^CHARACTER|^UUID"), "String"),
    (re.compile(r"^JSON|^STRUCT|^MAP|^VARIANT|^OBJECT"), "Object"),
)


@dataclass
class Checks:
    points: int | None = None
    rows_read: int | None = None
    requests: int | None = None
    workspace: list[str] = field(default_factory=list)
    """Attributes the workspace does not define, or defines with another type."""
    caps_passed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Checks that could not be made, one line each."""


def data_type(type_text: str) -> str | None:
    """The service's data_type for a column's type as the dialect names it, or None."""
    text = type_text.strip().upper()
    return next((name for pattern, name in _TYPES if pattern.search(text)), None)


def check(path: Path, integration: Integration, store: StateStore,
          workspace_cache: DefinitionsCache) -> Checks:
    """Every check of one changed file (its new version, at `path`)."""
    out = Checks()
    try:
        result = sync_file(path, options=RunOptions(dry_run=True), store=store)
    except SyncError as exc:
        out.notes.append(f"no dry run: {one_line(exc)}")
    else:
        dry = result.dry_run
        if dry is not None:
            out.points, out.rows_read, out.requests = dry.points, dry.rows_read, dry.requests
            out.caps_passed = caps_passed(integration, dry.rows)
    mapped = attributes_of(integration)
    if mapped:
        out.workspace, notes = _workspace(integration, mapped, workspace_cache)
        out.notes += notes
    elif integration.payload is not None:
        out.notes.append("attributes in PAYLOAD are not checked against the workspace")
    return out


def caps_passed(integration: Integration, rows: int) -> list[str]:
    """The caps the predicted run passes: the objects an irreversible kind would send
    above `max_deletes` (the run would be refused)."""
    if kinds.kind_of(integration).irreversible and rows > integration.max_deletes:
        return [f"max_deletes: the run would send {rows} deletions, above max_deletes "
                f"{integration.max_deletes}, and be refused"]
    return []


def _workspace(integration: Integration, mapped: dict[str, str],
               cache: DefinitionsCache) -> tuple[list[str], list[str]]:
    try:
        plan = prepare(integration, RunOptions(dry_run=True))
        expanded = plan.integration
        defined = defined_attributes(expanded, service_key(expanded), cache)
    except (SyncError, httpx.HTTPError) as exc:
        return [], [f"workspace not checked: {one_line(exc)}"]
    columns, notes = _column_types(plan)
    problems = []
    for name in sorted(mapped):
        column = mapped[name]
        have = columns.get(column.upper())
        if name not in defined:
            problems.append(f"{name}: not defined in the workspace"
                            + (f" (column {column} is {have})" if have else ""))
        elif have is not None and defined[name].lower() != have.lower():
            problems.append(f"{name}: defined in the workspace as {defined[name]}, "
                            f"column {column} is {have}")
    return problems, notes


def defined_attributes(integration: Integration, key: str,
                       cache: DefinitionsCache | None = None) -> dict[str, str]:
    """Every custom attribute the workspace defines → its data_type, every page read (once
    per service URL and key with a `cache`)."""
    url = integration.service.base_url
    with http_transport(integration) as transport:
        get = get_page(transport, integration.service, key)
        found = cache.get(url, key) if cache is not None else None
        if found is None:
            found = Definitions.from_answer(get(PATH))
            if cache is not None:
                cache.put(url, key, found)
        if found.status != 200:
            raise SyncError(f"GET {PATH} answered "
                            f"{found.status or 'without a list of attributes'}")
        return {name: str(d.get("data_type") or "") for name, d in found.read(get).items()}


def _column_types(plan: RunPlan) -> tuple[dict[str, str], list[str]]:
    """The source's columns (upper case) → the service's data_type, where one is known."""
    try:
        engine = warehouse_engine(plan.integration)
        try:
            schema = describe(engine, plan.spec, None)
        finally:
            duckdb_turns.release(engine)
            engine.dispose()
    except SyncError as exc:
        return {}, [f"column types not read: {one_line(exc)}"]
    typed: dict[str, Any] = {c.upper(): data_type(t) for c, t in schema.items()}
    return {c: t for c, t in typed.items() if t is not None}, []
