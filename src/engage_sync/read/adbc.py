"""Arrow-native reads from PostgreSQL through ADBC (`adbc-driver-postgresql`), behind the same
seam as the SQLAlchemy reader (`extract.stream_batches`).

Measured on this machine (`benchmarks/pg_read.py`): 1,000,000 rows of the service's sync format
read at about 1.2–1.6 million rows a second, against 0.26–0.32 million through SQLAlchemy's
server-side cursor and `pa.array`, so PostgreSQL reads go through ADBC when it is installed.

Invariants: the SQL is the one `extract.build_query` built (the same compound-cursor predicate,
ordering and byte-order collation), compiled for PostgreSQL with positional `$n` parameters;
batches hold at most `batch_rows` rows and come in the query's order; `numeric` columns (which
the driver returns as text) are cast to float64, as the SQLAlchemy path turns Decimals into
floats, and `json` columns are plain text; the connection URI holds the password only in
memory, never in a message.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

_DIALECT = postgresql.dialect(paramstyle="numeric_dollar")
_BATCH_BYTES = str(4 << 20)  # the driver's batch size hint; rows are re-cut to batch_rows


def available() -> bool:
    return importlib.util.find_spec("adbc_driver_postgresql") is not None


def libpq_uri(url: sa.URL, connect_args: Mapping[str, Any] | None = None) -> str:
    """A SQLAlchemy PostgreSQL URL (any driver) as a libpq URI, query options kept, and
    `connect_args` (libpq keywords, as psycopg takes them) added to its query."""
    extra = {k: str(v) for k, v in (connect_args or {}).items()}
    return url.set(drivername="postgresql").update_query_dict(extra).render_as_string(
        hide_password=False)


def compiled(query: sa.Select[Any]) -> tuple[str, list[Any]]:
    """The query's text with `$1, $2, …` and its parameters in that order."""
    c = query.compile(dialect=_DIALECT)
    return str(c), [c.params[name] for name in (c.positiontup or [])]


def batches(url: sa.URL, query: sa.Select[Any], batch_rows: int,
            connect_args: Mapping[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
    """The query's rows as record batches of at most `batch_rows` rows. Raises the driver's
    errors (`adbc_driver_manager.Error`); the caller translates them."""
    import adbc_driver_postgresql.dbapi as adbc

    sql, params = compiled(query)
    with adbc.connect(libpq_uri(url, connect_args)) as conn, conn.cursor() as cur:
        cur.adbc_statement.set_options(
            **{"adbc.postgresql.batch_size_hint_bytes": _BATCH_BYTES})
        cur.execute(sql, parameters=params or None)
        for batch in cur.fetch_record_batch():
            batch = _plain(batch)
            for offset in range(0, batch.num_rows, batch_rows):
                yield batch.slice(offset, batch_rows)


def _plain(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`numeric` columns arrive as text (the SQLAlchemy reader sends numbers), and `json`
    columns as an extension type over text: both become plain Arrow types."""
    changed = False
    columns = list(batch.columns)
    for k, field in enumerate(batch.schema):
        if (field.metadata or {}).get(b"ADBC:postgresql:typname") == b"numeric":
            columns[k], changed = columns[k].cast(pa.float64()), True
        elif isinstance(field.type, pa.ExtensionType):
            columns[k], changed = columns[k].storage, True
    if not changed:
        return batch
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
