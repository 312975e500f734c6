"""The write-back: after a run's own record, its record and its row outcomes into the user's
warehouse (`writeback/tables.py`), in SQLAlchemy Core.

Invariants:
- it never fails or blocks a sync: every error is caught, logged in one line (no value: the
  engine hides SQL parameters; no secret: URLs redacted) and remembered, and the
  integration's next run writes that run first (`state/writebacks.py`);
- the tables are made ready first (DDL commits an open transaction on some warehouses,
  Snowflake's among them); then a run is written in one warehouse transaction of DML only,
  which first deletes what an interrupted write-back of the same run left, so writing a run
  twice leaves it once;
- the target is the integration's own warehouse (URL and connect_args) unless
  `writeback.url` names another; the tables are created, and key columns added, as needed;
- its engines are opened and released by the opener handed in (`adapters/resources.py`
  opens every engine of a run), so this module only writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.config import secrets
from engage_sync.config.integration import Integration
from engage_sync.config.writeback import OUTCOMES_TABLE
from engage_sync.cursor.null_keys import NULL_KEY
from engage_sync.read.extract import resolve_columns
from engage_sync.read.key_digest import stored_cursor
from engage_sync.read.plan import RunPlan
from engage_sync.state.store import StateStore
from engage_sync.status.record import record
from engage_sync.writeback import tables

log = logging.getLogger("engage_sync.writeback")


Opener = Callable[[Integration, bool], AbstractContextManager[Engine]]
"""Opens an engine for the write-back, released on exit: its target, or (True) the run's
source warehouse (`adapters.resources.writeback_engine`)."""


def write_back(plan: RunPlan, store: StateStore, finished_since: datetime,
               open_engine: Opener) -> str | None:
    """Write back the plan's integration's runs that ended since `finished_since` and those
    left pending by earlier runs; never raises. Returns the error, or None when all were
    written (or write-back is off)."""
    integration = plan.integration
    if integration.writeback is None:
        return None
    try:
        run_ids = store.runs_to_write_back(integration.name, finished_since)
    except Exception as exc:  # the state database itself failed: the run said so already
        log.warning("integration %s: write-back skipped: %s", integration.name, _short(exc))
        return _short(exc)
    if not run_ids:
        return None
    with ExitStack() as opened:
        try:
            engine = opened.enter_context(open_engine(integration, False))
        except Exception as exc:
            return _failed(integration, store, run_ids, exc)
        return _write_runs(plan, store, engine, run_ids, open_engine)


def _write_runs(plan: RunPlan, store: StateStore, engine: Engine, run_ids: list[str],
                open_engine: Opener) -> str | None:
    integration, keys = plan.integration, key_names(plan, engine, open_engine)
    for n, run_id in enumerate(run_ids):
        try:
            _write_run(engine, integration, store, run_id, keys)
        except Exception as exc:
            return _failed(integration, store, run_ids[n:], exc)
        store.mark_written_back(run_id, integration.name)
    return None


def key_names(plan: RunPlan, target: Engine, open_engine: Opener) -> tuple[str, ...]:
    """The key columns as the source spells them (so a quoted name is the source's own
    identifier in every dialect); as declared when the source cannot be asked. The source is
    the target, unless `writeback.url` names another database."""
    integration = plan.integration
    declared = tuple(integration.key_columns)
    assert integration.writeback is not None
    spec = replace(plan.spec, columns=declared)
    try:
        with ExitStack() as opened:
            engine = target if integration.writeback.url is None else opened.enter_context(
                open_engine(integration, True))
            with engine.connect() as conn:
                resolved = resolve_columns(conn, spec)
        return tuple(resolved[c] for c in declared)
    except Exception:
        return declared


def _write_run(engine: Engine, integration: Integration, store: StateStore, run_id: str,
               keys: tuple[str, ...]) -> None:
    """One run: the tables made ready (DDL, which commits on some warehouses), then in one
    transaction of DML only its row and its outcome rows, replacing any an interrupted write
    left."""
    schema = integration.writeback.schema_name if integration.writeback else None
    at = tables.utc(datetime.now(UTC))
    assert at is not None
    run = store.run(run_id)
    chunks = store.outcome_rows(run_id)
    first = next(chunks, [])
    samples = [r.key_values for r in first if r.key_values is not None] or [
        _cursor_keys(store, integration)]
    metadata = sa.MetaData()
    runs = tables.runs_table(metadata, schema)
    with engine.begin() as conn:
        _ensure_schema(conn, schema)
        runs.create(conn, checkfirst=True)
        _add_counts(conn, runs, schema)
        outcomes, textual = _outcomes_table(conn, metadata, schema, keys, samples)
    with engine.begin() as conn:
        conn.execute(runs.delete().where(runs.c.run_id == run_id))
        conn.execute(runs.insert(), [tables.run_row(run, record(run), at)])
        conn.execute(outcomes.delete().where(outcomes.c.run_id == run_id))
        for chunk in chain([first], chunks):
            if chunk:
                insert_rows(conn, outcomes, [tables.as_text(
                    tables.outcome_row(run_id, integration.name, keys, row, at), textual)
                    for row in chunk])


def insert_rows(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert `rows` (dicts keyed by column). DuckDB: as one Arrow table, INSERT ... SELECT
    (its executemany inserts a row at a time; `benchmarks/writeback_outcomes.py` measures
    both); any other dialect, or values Arrow cannot type, through executemany."""
    if conn.dialect.name == "duckdb":
        try:
            arrow = pa.Table.from_pylist(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrow = None
        if arrow is not None:
            duck: Any = conn.connection.driver_connection
            columns = ", ".join(conn.dialect.identifier_preparer.quote(c)
                                for c in arrow.column_names)
            name = conn.dialect.identifier_preparer.format_table(table)
            duck.register("engage_writeback_rows", arrow)
            try:
                duck.execute(f"INSERT INTO {name} ({columns}) SELECT {columns} "
                             "FROM engage_writeback_rows")
            finally:
                duck.unregister("engage_writeback_rows")
            return
    conn.execute(table.insert(), rows)


def _cursor_keys(store: StateStore, integration: Integration) -> tuple[Any, ...]:
    """The key values of the integration's cursor (typed as the source's), or none."""
    cursor = stored_cursor(store, integration)
    return tuple(None if v is NULL_KEY else v for v in (cursor or ())[1:])


def _outcomes_table(conn: Connection, metadata: sa.MetaData, schema: str | None,
                    keys: tuple[str, ...], samples: list[tuple[Any, ...]]
                    ) -> tuple[sa.Table, frozenset[str]]:
    """The outcome table with this integration's key columns, created or given the key
    columns it lacks (typed after the `samples` of key values); and the key columns it
    already had as text, whose values are written as text."""
    typed = [(name, tables.column_type(v[n] for v in samples if len(v) > n))
             for n, name in enumerate(keys)]
    table = tables.outcomes_table(metadata, schema, typed)
    inspector = sa.inspect(conn)
    if not inspector.has_table(OUTCOMES_TABLE, schema=schema):
        table.create(conn)
        return table, frozenset()
    have = {c["name"].lower(): c["type"]
            for c in inspector.get_columns(OUTCOMES_TABLE, schema=schema)}
    for name, kind in typed:
        if name.lower() not in have:
            conn.exec_driver_sql(tables.add_column_sql(conn.dialect, table, name, kind))
    return table, frozenset(n for n in keys if isinstance(have.get(n.lower()), sa.String))


def _add_counts(conn: Connection, runs: sa.Table, schema: str | None) -> None:
    """A runs table an older version made gets the counts added since (`rows_left`)."""
    have = {c["name"].lower() for c in sa.inspect(conn).get_columns(runs.name, schema=schema)}
    for name in tables.RUN_COUNTS:
        if name not in have:
            conn.exec_driver_sql(tables.add_column_sql(conn.dialect, runs, name,
                                                       sa.BigInteger()))


def _ensure_schema(conn: Connection, schema: str | None) -> None:
    if schema is not None and not sa.inspect(conn).has_schema(schema):
        conn.execute(sa.schema.CreateSchema(schema, if_not_exists=True))


def _failed(integration: Integration, store: StateStore, run_ids: list[str],
            exc: BaseException) -> str:
    """Log and remember a failed write-back of `run_ids` for the next run."""
    error = _short(exc)
    log.warning("integration %s: writing back %d run(s) to the warehouse failed, the next run "
                "tries again: %s", integration.name, len(run_ids), error)
    try:
        for run_id in run_ids:
            store.mark_writeback_pending(run_id, integration.name, error)
    except Exception as again:
        log.warning("integration %s: the failed write-back could not be remembered: %s",
                    integration.name, _short(again))
    return error


def _short(exc: BaseException) -> str:
    """An error in one line: the driver's own message (SQLAlchemy's wrapper adds the SQL),
    with any URL's password hidden."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    first = text[0] if text else ""
    words = [secrets.redact_url(w) if "://" in w and "@" in w else w for w in first.split()]
    return f"{type(exc).__name__}: {' '.join(words)}"[:500]
