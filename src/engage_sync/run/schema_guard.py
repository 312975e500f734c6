"""The schema guard: before a run reads its window or sends anything, the source's schema is
compared with the one the last accepted run saw (`read/source_schema.py`).

Invariants:
- a column the integration reads (cursor, keys, mapped columns) whose type changed, or a
  payload key whose JSON type changed, stops the run with SchemaChanged before any request,
  naming each with its old and new types; the schema is then not recorded, so every run
  stops until one is told to accept it (`accept`), or the source is put back;
- added and removed columns are reported in the log and recorded (a removed mapped column
  fails the read itself, naming it; a removed payload key is simply not sent, never as NULL);
- payload keys keep every JSON type seen (a sample of the rows the next window starts with
  cannot show every row), and a guarded column that went missing keeps its old type (its
  return with another type is a change); a dry run checks but records nothing, not even a
  refusal.
"""

from __future__ import annotations

import logging

from sqlalchemy.engine import Engine

from engage_sync.errors import SchemaChanged
from engage_sync.read.plan import RunPlan
from engage_sync.read.source_schema import (
    PAYLOAD_PREFIX,
    SchemaChanges,
    compare,
    describe,
    kept,
)
from engage_sync.state.store import StateStore

log = logging.getLogger(__name__)


def guard_schema(plan: RunPlan, engine: Engine, state: StateStore, *, record: bool = True
                 ) -> SchemaChanges:
    """Compare the source's schema with the last accepted one; raise SchemaChanged for a
    retyped column or payload key unless the run accepts it (`RunOptions.accept_schema`);
    record the schema (unless not `record`)."""
    integration, spec, accept = plan.integration, plan.spec, plan.options.accept_schema
    fmt = integration.payload_format if integration.section is None else None
    now = describe(engine, spec, fmt.payload_column if fmt is not None else None,
                   after=state.cursor(integration.name))
    was = state.source_schema(integration.name)
    changes = compare(was, now, spec.columns) if was is not None else None
    if was is not None:
        now = kept(was, now, spec.columns)
    if changes is not None and changes.retyped:
        if not accept:
            raise SchemaChanged(refusal(integration.name, changes))
        log.warning("integration %s: accepted the new schema: %s", integration.name,
                    _retyped_text(changes))
    if changes is not None:
        _report(integration.name, changes)
    if record and now != was:
        state.record_source_schema(integration.name, now)
    return changes or SchemaChanges()


def refusal(name: str, changes: SchemaChanges) -> str:
    return (f"integration {name}: the source's schema changed since the last run: "
            f"{_retyped_text(changes)}; nothing was sent. Fix the source or the mapping, or "
            f"accept the new types with `engage-sync run {name} --accept-schema` (the flow's "
            f"`accept_schema` parameter)")


def _retyped_text(changes: SchemaChanges) -> str:
    return "; ".join(f"{_named(name)} was {old}, is now {new}"
                     for name, old, new in changes.retyped)


def _named(name: str) -> str:
    if name.startswith(PAYLOAD_PREFIX):
        return f"payload key '{name[len(PAYLOAD_PREFIX):]}'"
    return f"column {name}"


def _report(name: str, changes: SchemaChanges) -> None:
    columns = [c for c in changes.added if not c.startswith(PAYLOAD_PREFIX)]
    removed = [c for c in changes.removed if not c.startswith(PAYLOAD_PREFIX)]
    if columns:
        log.warning("integration %s: new column(s) in the source, not mapped: %s", name,
                    ", ".join(columns))
    if removed:
        log.warning("integration %s: column(s) gone from the source: %s", name,
                    ", ".join(removed))
