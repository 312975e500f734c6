"""Snowflake's Arrow reader (the connector's result batches) and the SQLAlchemy row reader
return the same rows in the same order for the same window, on the emulator with the real
connector: ties on UPDATED_AT, NULLs, text keys compared by bytes, time zones, numbers and
VARIANT payloads."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from engage_sync.cursor.window import Window
from engage_sync.read import snowflake_arrow
from engage_sync.read.extract import SourceSpec, stream_batches
from tests.snowflake_emulator import Emulator

T = datetime(2026, 5, 1, 12, 0)
KEYS = ["a", "B", "b", "é", "Z", "aa", "a a", "Ä", "z", "ß"]  # locale and byte order disagree
SPEC = SourceSpec(integration="sf", table="ARROW_SRC", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("KEY",),
                  columns=("UPDATED_AT", "KEY", "PAYLOAD", "AMOUNT", "SEEN_AT", "NOTE"))


@pytest.fixture(scope="module")
def engine(snowflake: Emulator) -> sa.Engine:
    rows = []
    for i in range(300):
        t = T + timedelta(seconds=i // 7)  # ties of 7 rows
        zone = f"{(i % 5) - 2:+03d}:00"
        document = json.dumps({"n": i, "s": "x" * (i % 4)})
        payload = "NULL" if i % 11 == 0 else f"PARSE_JSON('{document}')"
        amount = "NULL" if i % 13 == 0 else f"{i}.25"
        note = "NULL" if i % 2 else "'ünïcode'"
        rows.append(f"SELECT '{t:%Y-%m-%d %H:%M:%S}'::TIMESTAMP_NTZ, '{KEYS[i % 10]}{i:03d}', "
                    f"{payload}, {amount}, '{t:%Y-%m-%d %H:%M:%S} {zone}'::TIMESTAMP_TZ, {note}")
    snowflake.execute(
        "CREATE OR REPLACE TABLE ARROW_SRC (UPDATED_AT TIMESTAMP_NTZ, KEY VARCHAR, "
        "PAYLOAD VARIANT, AMOUNT NUMBER(12, 2), SEEN_AT TIMESTAMP_TZ, NOTE VARCHAR)",
        "INSERT INTO ARROW_SRC " + " UNION ALL ".join(rows))
    return snowflake.engine()


def read(engine: sa.Engine, reader: str, window: Window) -> list[tuple[Any, ...]]:
    """The rows as the transform sees them: times, parsed JSON, numbers."""
    out = []
    for batch in stream_batches(engine, replace(SPEC, reader=reader), window, 40):
        assert batch.num_rows <= 40
        assert not pa.types.is_timestamp(batch.schema.field("UPDATED_AT").type) \
            or batch.schema.field("UPDATED_AT").type.unit == "us"
        for row in batch.to_pylist():
            payload = row["PAYLOAD"]
            if isinstance(payload, str):
                payload = json.loads(payload)
            seen = row["SEEN_AT"]
            out.append((row["UPDATED_AT"], row["KEY"], payload,
                        None if row["AMOUNT"] is None else float(row["AMOUNT"]),
                        None if seen is None else seen.astimezone(UTC), row["NOTE"]))
    return out


@pytest.mark.parametrize("start", [None, 0, 5, 150])
def test_both_readers_return_the_same_rows_in_the_same_order(
        engine: sa.Engine, start: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    arrow_batches = []
    real = snowflake_arrow.batches

    def counted(*args: Any) -> Any:
        for batch in real(*args):
            arrow_batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(snowflake_arrow, "batches", counted)
    everything = read(engine, "sqlalchemy", Window(start=None, signpost=None))
    assert len(everything) == 300
    cursor = None if start is None else everything[start][:2]  # inside a tie on UPDATED_AT
    signpost = (T + timedelta(seconds=35)).replace(tzinfo=UTC)
    window = Window(start=cursor, signpost=signpost)
    rows = read(engine, "auto", window)
    assert sum(arrow_batches) == len(rows) > 0  # `auto` read Snowflake's Arrow batches
    assert rows == read(engine, "sqlalchemy", window)
    assert rows == [r for r in everything
                    if (cursor is None or r[:2] > cursor) and r[0] <= T + timedelta(seconds=35)]
    assert [r[:2] for r in rows] == sorted(r[:2] for r in rows)  # by bytes: Python's order
    assert any(r[2] is None for r in rows) and any(r[3] is None for r in rows)
