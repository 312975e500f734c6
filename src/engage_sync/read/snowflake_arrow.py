"""Snowflake read as Arrow: the connector's own result batches (`fetch_arrow_batches`), behind
the same seam as the row reader (`extract.stream_batches`, `warehouse.reader: auto`).

Invariants: the query is executed through SQLAlchemy, so its parameters are bound exactly as
the row reader binds them; batches hold at most `batch_rows` rows, in the query's order,
with the row reader's column names; nanosecond timestamps become microseconds (Python's
datetimes, as the row reader's); VARIANT columns arrive as JSON text, as the row reader's.
Compared row by row with the row reader on the emulator (tests/integration/
test_snowflake_arrow_reader.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection


def batches(conn: Connection, query: sa.Select[Any], names: Sequence[str],
                       batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The query's rows as record batches of at most `batch_rows` rows, named `names`."""
    cursor = conn.execute(query).cursor
    try:
        for table in cursor.fetch_arrow_batches():
            table = _microseconds(table).rename_columns(list(names))
            for batch in table.to_batches(max_chunksize=batch_rows):
                if batch.num_rows:
                    yield batch
    finally:
        cursor.close()


def _microseconds(table: pa.Table) -> pa.Table:
    for k, column in enumerate(table.schema):
        if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
            table = table.set_column(k, column.name, table.column(k).cast(
                pa.timestamp("us", column.type.tz)))
    return table
