"""Rows of a retried range whose user has a newer row after it: attributes sent again must
never write older values over newer ones.

A retry (`run/retries.py`) re-reads one failed request's range; a user's later row may have
landed since (or will be read by a window). The warehouse finds the range's rows whose user
has a row with a later cursor value than the range's end (one EXISTS over the source); their
row keys come back rendered as the reader renders them (`items.render_key`).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.cursor.window import Window
from engage_sync.errors import SourceError
from engage_sync.items import render_key
from engage_sync.read.extract import (
    binary_ordered,
    build_query,
    connected,
    first_line,
    resolve_columns,
)
from engage_sync.read.source_spec import SourceSpec


def newer_elsewhere(engine: Engine, spec: SourceSpec, window: Window,
                    users: tuple[str, ...]) -> frozenset[str]:
    """Row keys of the window's rows whose user (the `users` columns) has a row with a cursor
    value after `window.until`; empty without `until`, users, or with digested key columns."""
    if window.until is None or not users or spec.digested:
        return frozenset()
    with connected(engine, spec) as conn:
        resolved = resolve_columns(conn, spec)
        try:
            inner = build_query(spec, resolved, window, binary_ordered(conn, spec, resolved)
                                ).order_by(None).subquery("r")
            names = [resolved[u] for u in users] + [resolved[spec.cursor_column]]
            later = _source_with(spec, names)
            newer = sa.select(sa.literal(1)).select_from(later).where(
                *(later.c[resolved[u]] == inner.c[u] for u in users),
                later.c[resolved[spec.cursor_column]] > window.until[0])
            query = sa.select(*(inner.c[k] for k in spec.key_columns)).where(sa.exists(newer))
            return frozenset(render_key(row) for row in conn.execute(query))
        except sa.exc.SQLAlchemyError as exc:
            raise SourceError(f"integration {spec.integration}: finding the users of a retried "
                              f"range with newer rows failed: {first_line(exc)}") from exc


def _source_with(spec: SourceSpec, names: list[str]) -> Any:
    """The source again, as `l`, with these columns addressable."""
    columns: list[sa.ColumnClause[Any]] = [sa.column(n) for n in dict.fromkeys(names)]
    if spec.query is not None:
        return sa.text(spec.query).columns(*columns).subquery("l")
    assert spec.table is not None
    return sa.table(spec.table, *columns, schema=spec.schema).alias("l")
