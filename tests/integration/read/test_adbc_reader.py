"""The ADBC reader and the SQLAlchemy reader return the same rows in the same order for the
same window on PostgreSQL: ties on UPDATED_AT, NULLs, text keys compared by bytes, time zones,
numbers and JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from engage_sync.cursor.window import Window
from engage_sync.read import adbc as extract_adbc
from engage_sync.read import extract
from engage_sync.read.extract import SourceSpec, stream_batches

pytestmark = pytest.mark.postgres

T = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
KEYS = ["a", "B", "b", "é", "Z", "aa", "a a", "Ä", "z", "ß"]  # en_US and byte order disagree


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS adbc_src")
        conn.exec_driver_sql(
            'CREATE TABLE adbc_src ("UPDATED_AT" timestamptz, "KEY" text COLLATE "en_US", '
            'payload jsonb, amount numeric(12, 2), note text)'
            if _has_en_us(conn) else
            'CREATE TABLE adbc_src ("UPDATED_AT" timestamptz, "KEY" text, payload jsonb, '
            'amount numeric(12, 2), note text)')
        rows = []
        for i in range(300):
            zone = timezone(timedelta(hours=(i % 5) - 2))
            rows.append({"t": (T + timedelta(seconds=i // 7)).astimezone(zone),
                         "k": f"{KEYS[i % len(KEYS)]}{i:03d}",
                         "p": None if i % 11 == 0 else json.dumps({"n": i, "s": "x" * (i % 4)}),
                         "a": None if i % 13 == 0 else f"{i}.25",
                         "note": None if i % 2 else "ünïcode"})
        conn.execute(sa.text('INSERT INTO adbc_src VALUES (:t, :k, CAST(:p AS jsonb), '
                             'CAST(:a AS numeric), :note)'), rows)
    yield engine
    engine.dispose()


def _has_en_us(conn: sa.Connection) -> bool:
    return bool(conn.exec_driver_sql(
        "SELECT 1 FROM pg_collation WHERE collname = 'en_US'").first())


SPEC = SourceSpec(integration="adbc", table="adbc_src", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("KEY",),
                  columns=("UPDATED_AT", "KEY", "PAYLOAD", "AMOUNT", "NOTE"))


def read(engine: sa.Engine, reader: str, window: Window) -> list[tuple[Any, ...]]:
    """The rows as the transform sees them: aware UTC times, parsed JSON, numbers."""
    out = []
    for batch in stream_batches(engine, replace(SPEC, reader=reader), window, 40):
        assert batch.num_rows <= 40
        amount = batch.schema.field("AMOUNT").type
        assert pa.types.is_floating(amount) or pa.types.is_decimal(amount), amount
        for row in batch.to_pylist():
            payload = row["PAYLOAD"]
            if isinstance(payload, str):
                payload = json.loads(payload)
            out.append((row["UPDATED_AT"].astimezone(UTC), row["KEY"], payload,
                        None if row["AMOUNT"] is None else float(row["AMOUNT"]), row["NOTE"]))
    return out


@pytest.mark.parametrize("start", [None, 0, 5, 150])
def test_both_readers_return_the_same_rows_in_the_same_order(
    engine: sa.Engine, start: int | None
) -> None:
    assert extract_adbc.available() and extract._arrow_native(engine, SPEC)
    everything = read(engine, "sqlalchemy", Window(start=None, signpost=None))
    cursor = None if start is None else everything[start][:2]  # inside a tie on UPDATED_AT
    window = Window(start=cursor, signpost=T + timedelta(seconds=35))
    rows = read(engine, "auto", window)
    assert rows == read(engine, "sqlalchemy", window)
    assert rows == [r for r in everything
                    if (cursor is None or r[:2] > cursor) and r[0] <= T + timedelta(seconds=35)]
    assert [r[:2] for r in rows] == sorted(r[:2] for r in rows)  # by bytes: Python's order
    assert any(r[2] is None for r in rows) and any(r[3] is None for r in rows)


def test_a_bad_query_is_a_source_error_naming_the_integration(engine: sa.Engine) -> None:
    from engage_sync.errors import SourceError

    bad = replace(SPEC, table=None, query=(  # fails on the first row, not on the probes
        'SELECT "UPDATED_AT", "KEY", payload, amount / (amount - amount) AS amount, note '
        "FROM adbc_src"))
    with pytest.raises(SourceError, match="integration adbc: reading the configured query"):
        list(stream_batches(engine, bad, Window(start=None, signpost=None), 40))
