"""The identifier columns of a whole source, and nothing else, as one Arrow table: what the
leave check of a cursor integration compares with the users it found before.

Only the identifier columns are selected (no attribute, no cursor), distinct and not NULL,
and they come back as Arrow: DuckDB's own reader, ADBC on PostgreSQL where installed, else the
driver's rows turned into Arrow a batch at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.errors import SourceError
from engage_sync.read import adbc
from engage_sync.read.driver_rows import rows_to_batch
from engage_sync.read.duckdb_slices import driver_sql
from engage_sync.read.extract import connected, first_line, resolve_columns, source_of
from engage_sync.read.source_spec import SourceSpec

BATCH_ROWS = 100_000


def key_query(spec: SourceSpec, resolved: dict[str, str], ids: Sequence[str]
              ) -> sa.Select[Any]:
    cols: list[sa.ColumnElement[Any]] = [sa.column(resolved[c]).label(c) for c in ids]
    return sa.select(*cols).select_from(source_of(spec)).where(
        *(c.is_not(None) for c in cols)).distinct()


def read_keys(engine: Engine, spec: SourceSpec, ids: Sequence[str]) -> pa.Table:
    """Every distinct, non-NULL identifier of the source (columns named as `ids`). Raises
    SourceError naming the integration when the warehouse refuses."""
    try:
        with connected(engine, spec) as conn:
            query = key_query(spec, resolve_columns(conn, spec), ids)
            if engine.dialect.name == "duckdb":
                sql, params = driver_sql(conn, query)
                raw = conn.connection.driver_connection
                assert raw is not None
                table: pa.Table = raw.sql(sql, params=params).to_arrow_table()
                return table.rename_columns(list(ids))
            if engine.dialect.name == "postgresql" and spec.reader != "sqlalchemy" \
                    and adbc.available():
                batches = list(adbc.batches(engine.url, query, BATCH_ROWS, spec.connect_args))
                return _table(batches, ids)
            result = conn.execution_options(stream_results=True, yield_per=BATCH_ROWS
                                            ).execute(query)
            return _table([rows_to_batch(rows, ids) for rows in result.partitions()], ids)
    except _errors() as exc:
        raise SourceError(f"integration {spec.integration}: reading the identifiers of the "
                          f"source failed: {first_line(exc)}") from exc


def _errors() -> tuple[type[BaseException], ...]:
    """What the drivers raise: SQLAlchemy's, DuckDB's own reader's, Arrow's (ADBC's)."""
    import duckdb

    return (sa.exc.SQLAlchemyError, duckdb.Error, OSError, pa.ArrowException)


def _table(batches: list[pa.RecordBatch], ids: Sequence[str]) -> pa.Table:
    if not batches:
        return pa.table({c: pa.array([], pa.string()) for c in ids})
    return pa.Table.from_batches(batches).rename_columns(list(ids))
