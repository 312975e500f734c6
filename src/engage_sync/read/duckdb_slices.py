"""A large DuckDB window read in slices of its cursor column, so DuckDB never sorts it whole.

DuckDB sorts the whole window before the first batch; under the run's memory limit it spills,
but the merge of a large sort pins a block of every spilled run, so a large table's first
load runs out of memory (`benchmarks/duckdb_cap.py`, figures in benchmarks/README.md).
A window of more than `SLICE_ROWS` rows is cut at values of its cursor column taken from a
sample of its rows, and each slice is read, sorted and streamed in turn.

Invariants:
- the slices are the window's rows cut by cursor value only: slice i holds the rows with
  bound[i-1] <= cursor < bound[i] (the first has no lower bound; the last has no upper bound
  and keeps the rows whose cursor is NULL, which the whole query sorts last). So each row is in
  exactly one slice, rows tied on a cursor value share a slice, and the slices read one after
  the other give the rows in the order of the whole query;
- a query whose rows depend on each other (a window function over the window, as
  `LATER_ROWS` is) is not sliced as is (`duckdb_later` adds what lies beyond each slice), and
  a configured SQL `query` (run once per slice, it might not give the same rows each time) is
  never sliced: the caller reads it whole;
- cut values are ordered as the warehouse orders them (aware datetimes by their instant);
- a window of at most `SLICE_ROWS` rows is read as one query (one extra COUNT).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

SLICE_ROWS = 62_500
"""Rows DuckDB sorts at once, at most about, until a window has `MAX_SLICES` slices: the
smaller the slice, the lower a read's peak memory, and the whole run's with it
(`benchmarks/duckdb_cap.py`, figures in benchmarks/README.md)."""
MAX_SLICES = 64
"""At most this many slices: a slice of a table not stored in cursor order scans the whole
table, so past this count more slices cost more scans than their smaller sorts save, while
slices this few still sort under the default 128 MB limit at 100M rows
(`benchmarks/duckdb_cap.py`, figures in benchmarks/README.md)."""
SAMPLE_ROWS = 20_000
"""Cursor values sampled to place the cuts (slices come within a few % of their size)."""


def slices(conn: Connection, query: sa.Select[Any], cursor: str, whole: bool = False,
           slice_rows: int | None = None) -> Generator[sa.Select[Any]]:
    """The window's query (ordered, its cursor column selected as `cursor`) as the queries of
    its slices, in order: the query itself when it must be read `whole` (a SQL query of the
    config's, which might not give the same rows twice) or `plan` cuts it nowhere."""
    bounds = None if whole else plan(conn, query, cursor, slice_rows)
    if bounds is None:
        yield query
    else:
        yield from sliced(query, cursor, bounds)


def plan(conn: Connection, query: sa.Select[Any], cursor: str,
         slice_rows: int | None = None) -> list[Any] | None:
    """The cut values of the window's slices (`cuts`), or None when it is read as one query:
    it holds at most `slice_rows` rows (default `SLICE_ROWS`), or its sample holds no cursor
    value to cut at."""
    slice_rows = slice_rows or SLICE_ROWS
    window = query.order_by(None).subquery("engage_window")
    # fetched to the end: DuckDB runs nothing else on a connection with a result open
    rows = int(conn.execute(sa.select(sa.func.count()).select_from(window)).scalar_one())
    if rows <= slice_rows:
        return None
    valued = sa.select(window.c[cursor].label("v")).where(window.c[cursor].is_not(None)
                                                           ).subquery("engage_valued")
    sample = sa.select(valued.c.v).suffix_with(f"USING SAMPLE reservoir({SAMPLE_ROWS} ROWS)")
    values = sorted(instant(v) for (v,) in conn.execute(sample))
    # two slices or more: `cuts` gives at least one value
    return cuts(values, slice_count(rows, slice_rows)) if values else None


def slice_count(rows: int, slice_rows: int) -> int:
    """How many slices a window of `rows` rows is read in: of `slice_rows` rows each, but at
    most `MAX_SLICES` (each slice of a table not stored in cursor order scans it whole).
    Pure."""
    return min(-(-rows // slice_rows), MAX_SLICES)


def instant(value: Any) -> Any:
    """A sampled cursor value as it must be ordered: an aware datetime in UTC (DuckDB gives
    TIMESTAMPTZ in the session's zone, and Python orders two datetimes of one zone by their
    wall-clock time, which repeats an hour when the clocks go back)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    return value


def cuts(values: list[Any], count: int) -> list[Any]:
    """The distinct cut values that split sorted sampled `values` into `count` parts. Pure."""
    step = len(values) / count
    picked = (values[int(step * k)] for k in range(1, count))
    out: list[Any] = []
    for value in picked:
        if not out or value > out[-1]:
            out.append(value)
    return out


def sliced(query: sa.Select[Any], cursor: str, bounds: list[Any]) -> Iterator[sa.Select[Any]]:
    """The query restricted to each slice between consecutive `bounds` (see the invariants)."""
    column = query.selected_columns[cursor]
    lower: Any = None
    for bound in [*bounds, None]:
        part = query
        if bound is not None:
            part = part.where(column < bound)
        if lower is not None:  # the last slice keeps NULL cursors, sorted last
            at_least = column >= lower
            part = part.where(at_least if bound is not None else sa.or_(at_least,
                                                                         column.is_(None)))
        yield part
        lower = bound


def driver_sql(conn: Connection, query: sa.Select[Any]) -> tuple[str, list[Any]]:
    """The query as DuckDB's driver takes it: its SQL and its positional parameters."""
    compiled = query.compile(dialect=conn.dialect)
    return str(compiled), [compiled.params[name] for name in (compiled.positiontup or [])]
