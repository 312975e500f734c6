"""Read the rows of a window from the warehouse as Arrow record batches.

Invariants:
- rows come in (cursor column, key columns) order, strictly after the window's start cursor and
  at or before its signpost; the same window read twice yields the same rows in the same order
  (as long as the source does not change under it);
- SQL is built with SQLAlchemy Core and quoted identifiers, never by string formatting; a SQL
  `query` from the config is wrapped as a subquery;
- column names in the batches are spelled as in the config, whatever the case in the source
  (PostgreSQL folds unquoted names to lower case, Snowflake to upper case);
- memory is bounded by `batch_rows`: DuckDB streams Arrow natively (a window of more than
  `duckdb_slices.SLICE_ROWS` rows in slices of its cursor, each sorted on its own),
  PostgreSQL through ADBC (`extract_adbc`) when installed, other dialects use a server-side
  cursor (`stream_results`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.cursor.window import Window, align
from engage_sync.errors import SourceError
from engage_sync.read import adbc as extract_adbc
from engage_sync.read import (
    duckdb_later,
    duckdb_slices,
    duckdb_turns,
    key_digest,
    order_terms,
    snowflake_arrow,
    warehouse_hints,
)
from engage_sync.read.driver_rows import rows_to_batch
from engage_sync.read.source_spec import SourceSpec

Beyond = Callable[[list[sa.ColumnElement[Any]], sa.ColumnElement[Any]], sa.ColumnElement[Any]]
"""A term of LATER_ROWS from a row's user columns and its cursor, qualified by the source
table as a correlated subquery needs them (`build_query`)."""

OLDEST = datetime(1970, 1, 1, tzinfo=UTC)
"""The cursor value of a row whose cursor is NULL, with `null_cursor: oldest`."""


def source_of(spec: SourceSpec, declared: Sequence[str] = ()) -> sa.FromClause:
    """The table or the SQL query read from; a table declares the `declared` columns, for a
    correlated subquery to name them by it."""
    if spec.query is not None:
        return sa.text(spec.query).columns().subquery("engage_src")
    assert spec.table is not None
    return sa.table(spec.table, *(sa.column(c) for c in declared), schema=spec.schema)


def resolve_columns(conn: Connection, spec: SourceSpec) -> dict[str, str]:
    """Config column name → the source's own spelling. Raises SourceError naming what is missing."""
    try:
        probe: sa.Select[Any] = (
            sa.select(sa.literal_column("*")).select_from(source_of(spec)).limit(0)
        )
        actual = list(conn.execute(probe).keys())
    except sa.exc.SQLAlchemyError as exc:
        said = first_line(exc)
        fix = warehouse_hints.hint(conn.dialect.name, said) or (
            "check source.table / source.query / source.schema in the integration file, or "
            "create the table")
        raise SourceError(
            f"integration {spec.integration}: cannot read the source ({_what(spec)}): "
            f"{said}; {fix}") from exc
    exact = {a: a for a in actual}
    folded: dict[str, list[str]] = {}
    for a in actual:
        folded.setdefault(a.lower(), []).append(a)
    resolved: dict[str, str] = {}
    for name in spec.columns:
        if name in exact:
            resolved[name] = name
        elif len(folded.get(name.lower(), [])) == 1:
            resolved[name] = folded[name.lower()][0]
        else:
            raise SourceError(
                f"integration {spec.integration}: column '{name}' is not in {_what(spec)} "
                f"(columns there: {', '.join(actual) or 'none'}); fix the config or the source"
            )
    return resolved


_PG_TEXT_TYPES = {19, 25, 1042, 1043}  # name, text, char(n), varchar: OIDs of PostgreSQL


def binary_ordered(conn: Connection, spec: SourceSpec, resolved: dict[str, str]) -> frozenset[str]:
    """Order columns of text type on PostgreSQL, to be ordered by their bytes (COLLATE "C").

    engage-sync compares cursors in Python (resume, lookback, backfill ranges), where text
    sorts by code point; a column collated by language rules (en_US, ICU) sorts 'a, B, c' in
    SQL but 'B, a, c' in Python, and a resume would skip or repeat rows. Byte order of UTF-8
    is code-point order, so "C" makes both agree. Other dialects used here compare text
    binarily by default."""
    if conn.dialect.name != "postgresql":
        return frozenset()
    order = [spec.cursor_column, *spec.key_columns]
    columns: list[sa.ColumnElement[Any]] = [sa.column(resolved[c]).label(c) for c in order]
    probe: sa.Select[Any] = sa.select(*columns).select_from(source_of(spec)).limit(0)
    description = conn.execute(probe).cursor.description or ()
    return frozenset(str(d[0]) for d in description if d[1] in _PG_TEXT_TYPES)


def build_query(spec: SourceSpec, resolved: dict[str, str], window: Window,
                binary: frozenset[str] = frozenset(), beyond: Beyond | None = None,
                before: Beyond | None = None, elsewhere: Beyond | None = None
                ) -> sa.Select[Any]:
    """The ordered, windowed SELECT. The compound-cursor predicate is spelled out with OR/AND
    (not row-value comparison) so that every dialect, Snowflake and BigQuery included, runs it.
    `beyond` adds to LATER_ROWS a row's later rows outside the rows the query keeps (a slice
    of the window, `duckdb_later`); `before` and `elsewhere` do the same for EARLIER_ROWS and
    OTHER_ROWS (`SourceSpec.merged`)."""
    outer = beyond or before or elsewhere
    src = source_of(spec, [resolved[c] for c in dict.fromkeys(  # the terms name them by it
        (*spec.superseded_by, spec.cursor_column))] if outer else ())

    def col(name: str, qualified: bool = False) -> sa.ColumnElement[Any]:
        column: sa.ColumnElement[Any] = sa.column(resolved[name])
        if qualified:  # in a subquery, a lone "USER" is DuckDB's current_user, not the source's
            column = src.c[resolved[name]]
        if name == spec.cursor_column and spec.null_cursor_oldest:
            oldest = align(OLDEST, window.signpost) if window.signpost is not None else OLDEST
            return sa.func.coalesce(column, oldest)
        return column

    def position(name: str) -> sa.ColumnElement[Any]:
        return key_digest.key_md5(col(name)) if name in spec.digested else col(name)

    def ordered(name: str) -> sa.ColumnElement[Any]:
        return position(name).collate("C") if name in binary else position(name)

    order = [ordered(spec.cursor_column), *(ordered(k) for k in spec.key_columns)]
    digests = [position(k).label(key_digest.label(k)) for k in spec.key_columns
               if k in spec.digested]
    # NULL keys sort first, as NULL_KEY does in Python (nulls.py)
    sort = [order[0], *(o.nulls_first() for o in order[1:])]

    def outside(term: Beyond | None) -> sa.ColumnElement[Any] | None:
        return term([col(c, qualified=True) for c in spec.superseded_by],
                    col(spec.cursor_column, qualified=True)) if term else None

    user = [col(c) for c in spec.superseded_by]
    counted = [] if not user else [
        order_terms.earlier_rows(user, sort, outside(before)),
        order_terms.other_rows(user, outside(elsewhere)),
    ] if spec.merged else [order_terms.later_rows(user, order, outside(beyond))]
    query = sa.select(*(col(c).label(c) for c in spec.columns), *digests, *counted
                      ).select_from(src)
    return _within(query, spec, col, order, window).order_by(*sort)


def _within(query: sa.Select[Any], spec: SourceSpec, col: Any,
            order: list[sa.ColumnElement[Any]], window: Window) -> sa.Select[Any]:
    """`query` kept to the window: after its start, up to its signpost, from its floor,
    before its end, in its partition, up to its `until`."""
    if window.start is not None:
        query = query.where(order_terms.after(order, window.start))
    if window.signpost is not None:
        query = query.where(order[0] <= window.signpost)
    if window.floor is not None:
        query = query.where(order[0] >= window.floor)
    if window.before is not None:
        query = query.where(order[0] < window.before)
    if window.partition is not None:
        query = query.where(_in_partition(spec, col, window.partition))
    if window.until is not None:
        query = query.where(sa.not_(order_terms.after(order, window.until)))
    return query


def _in_partition(spec: SourceSpec, col: Any, partition: tuple[int, int]
                  ) -> sa.ColumnElement[bool]:
    """The rows of partition `index` of `count`: computed by the warehouse, so each partition
    reads only its own rows."""
    index, count = partition
    if spec.partition_column is None:
        raise ValueError(f"integration {spec.integration}: this kind cannot be partitioned")
    bucket = key_digest.key_bucket(col(spec.partition_column), sa.literal(count, sa.Integer))
    return bucket == index


def stream_batches(
    engine: Engine, spec: SourceSpec, window: Window, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Yield the window's rows as record batches of at most `batch_rows` rows."""
    try:
        with connected(engine, spec) as conn:
            resolved = resolve_columns(conn, spec)
            query = build_query(spec, resolved, window, binary_ordered(conn, spec, resolved))
            if engine.dialect.name == "duckdb":
                import duckdb  # the driver's own errors: its Arrow reader is not SQLAlchemy's

                # closed here, after the reader of its last part: what it leaves on the
                # connection (`duckdb_later`'s table) goes before the connection does
                parts = closing(_duckdb_parts(conn, spec, resolved, window, query))
                try:
                    with parts as queries:
                        for part in queries:
                            yield from _duckdb_batches(conn, part, batch_rows)
                # an error after the first batch (DuckDB out of memory while it merges a
                # large sort) comes out of the Arrow reader as OSError, not duckdb.Error
                except (duckdb.Error, OSError, pa.ArrowException) as exc:
                    raise _read_failed(engine, spec, exc) from exc
            elif _arrow_native(engine, spec):
                yield from _adbc_batches(engine, spec, query, batch_rows)
            elif engine.dialect.name == "snowflake" and spec.reader != "sqlalchemy":
                yield from snowflake_arrow.batches(conn, query, spec.names, batch_rows)
            else:
                yield from _generic_batches(conn, query, spec.names, batch_rows)
    except sa.exc.SQLAlchemyError as exc:
        raise _read_failed(engine, spec, exc) from exc
    if engine.dialect.name == "duckdb" and not (engine.url.database or ":memory:"
                                                ).startswith(":memory:"):
        # the window is read: DuckDB's buffers (they grow with the window) go back now, not at the
        # run's end, while the run settles, folds and its field helper writes; a later read
        # opens the file again
        duckdb_turns.release(engine)


def _duckdb_parts(conn: Connection, spec: SourceSpec, resolved: dict[str, str],
                  window: Window, query: sa.Select[Any]) -> Generator[sa.Select[Any]]:
    """The queries a DuckDB window is read in, one after the other: slices of its cursor
    (`duckdb_slices`; `duckdb_later` when its rows count their user's later rows), or
    `query` whole (a SQL query source, or a small window)."""
    if spec.superseded_by and not spec.read_whole:
        # the user's columns are read columns (`source_spec`): the table groups them
        plain = build_query(replace(spec, superseded_by=(), merged=False), resolved, window)
        table = duckdb_later.table_name()
        if spec.merged:
            sliced = build_query(spec, resolved, window,
                                 before=partial(duckdb_later.before, table),
                                 elsewhere=partial(duckdb_later.elsewhere, table))
        else:
            sliced = build_query(spec, resolved, window,
                                 beyond=partial(duckdb_later.beyond, table))
        return duckdb_later.slices(conn, table, plain, query, sliced, spec.cursor_column,
                                   spec.superseded_by, spec.counted)
    return duckdb_slices.slices(conn, query, spec.cursor_column, whole=spec.read_whole)


def _read_failed(engine: Engine, spec: SourceSpec, exc: BaseException) -> SourceError:
    """A read that failed, its first line or mid-stream (a dropped connection): the warehouse
    named by dialect and host:port or file (never a user or password), and what it leaves."""
    url = engine.url
    where = (f"{url.get_backend_name()} at {url.host}{f':{url.port}' if url.port else ''}"
             if url.host else f"{url.get_backend_name()} {url.database or ''}".rstrip())
    said = first_line(exc)
    fix = warehouse_hints.read_fix(engine.dialect.name, said, whole=spec.read_whole)
    return SourceError(
        f"integration {spec.integration}: reading {_what(spec)} from the warehouse ({where}) "
        f"failed: {said}; {f'{fix}; ' if fix else ''}the rows sent before it are settled and "
        "the next run reads on from there")


def _arrow_native(engine: Engine, spec: SourceSpec) -> bool:
    """PostgreSQL is read through ADBC when the driver is installed, unless the integration
    asks for the row reader (`warehouse.reader: sqlalchemy`)."""
    return (engine.dialect.name == "postgresql" and spec.reader != "sqlalchemy"
            and extract_adbc.available())


def _adbc_batches(engine: Engine, spec: SourceSpec, query: sa.Select[Any], batch_rows: int
                  ) -> Iterator[pa.RecordBatch]:
    from adbc_driver_manager import Error as AdbcError

    try:
        yield from extract_adbc.batches(engine.url, query, batch_rows, spec.connect_args)
    except (AdbcError, OSError, pa.ArrowException) as exc:  # errors mid-stream come as Arrow's
        raise _read_failed(engine, spec, exc) from exc


def count_rows(engine: Engine, spec: SourceSpec, window: Window) -> int:
    """How many rows the window holds (the delete cap counts before anything is sent)."""
    try:
        with connected(engine, spec) as conn:
            resolved = resolve_columns(conn, spec)
            inner = build_query(spec, resolved, window, binary_ordered(conn, spec, resolved)
                                ).order_by(None).subquery("w")
            return int(conn.scalar(sa.select(sa.func.count()).select_from(inner)) or 0)
    except sa.exc.SQLAlchemyError as exc:
        raise SourceError(
            f"integration {spec.integration}: counting rows of {_what(spec)} failed: "
            f"{first_line(exc)}"
        ) from exc


def count_null_cursors(engine: Engine, spec: SourceSpec) -> int:
    """How many rows of the source have a NULL cursor value (never in any window)."""
    try:
        with engine.connect() as conn:
            resolved = resolve_columns(conn, spec)
            cursor: sa.ColumnClause[Any] = sa.column(resolved[spec.cursor_column])
            query: sa.Select[Any] = (sa.select(sa.func.count()).select_from(source_of(spec))
                                     .where(cursor.is_(None)))
            return int(conn.scalar(query) or 0)
    except sa.exc.SQLAlchemyError as exc:
        raise SourceError(
            f"integration {spec.integration}: counting rows of {_what(spec)} failed: "
            f"{first_line(exc)}"
        ) from exc


def sample_cursor(engine: Engine, spec: SourceSpec) -> Any:
    """One value of the cursor column (or None for an empty source), to learn its Python type:
    aware datetime, naive datetime (taken as UTC) or text (SQLite)."""
    try:
        with connected(engine, spec) as conn:
            resolved = resolve_columns(conn, spec)
            cursor: sa.ColumnClause[Any] = sa.column(resolved[spec.cursor_column])
            query: sa.Select[Any] = (
                sa.select(cursor).select_from(source_of(spec)).where(cursor.is_not(None)).limit(1))
            return conn.scalar(query)
    except sa.exc.SQLAlchemyError as exc:
        raise SourceError(
            f"integration {spec.integration}: reading {_what(spec)} failed: {first_line(exc)}"
        ) from exc


def _duckdb_batches(
    conn: Connection, query: sa.Select[Any], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    sql, params = duckdb_slices.driver_sql(conn, query)
    raw = conn.connection.driver_connection
    assert raw is not None
    reader = raw.sql(sql, params=params).to_arrow_reader(batch_rows)
    for batch in reader:
        if batch.num_rows:
            yield batch


def _generic_batches(
    conn: Connection, query: sa.Select[Any], names: Sequence[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    result = conn.execution_options(stream_results=True, yield_per=batch_rows).execute(query)
    for rows in result.partitions(batch_rows):
        if rows:
            yield rows_to_batch(rows, names)


@contextmanager
def connected(engine: Engine, spec: SourceSpec) -> Iterator[Connection]:
    """A connection to the warehouse; a failure to connect is a SourceError saying so (the URL
    is never in the message: it may hold a password)."""
    try:
        conn = engine.connect()
    except sa.exc.SQLAlchemyError as exc:
        said = first_line(exc)
        fix = warehouse_hints.hint(engine.dialect.name, said) or (
            "check warehouse.url in the integration file and that the warehouse is up")
        raise SourceError(
            f"integration {spec.integration}: cannot connect to the warehouse: {said}; "
            f"{fix}") from exc
    with conn:
        yield conn


def _what(spec: SourceSpec) -> str:
    if spec.query is not None:
        return "the configured query"
    return f"table {spec.schema + '.' if spec.schema else ''}{spec.table}"


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__
