"""Snowflake read throughput on its emulator: the window's rows as Arrow batches, through the
SQLAlchemy row reader (`warehouse.reader: sqlalchemy`) and through the connector's Arrow
result batches (`auto`), both over the real `snowflake-connector-python`.

Starts fakesnow's HTTP server on 127.0.0.1 (as the tests do), fills a table of N rows in the
service's sync format (VARIANT payload), then reads the whole window with each reader,
alternating, `--runs` times each, and prints rows/s per run and the medians. The emulator is
DuckDB behind an HTTP front: its own cost is in both figures, so the ratio, not the rate, is
what carries over to a real account.

    .venv/bin/python benchmarks/snowflake_read.py [--rows 200000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engage_sync.cursor.window import Window
from engage_sync.read.extract import SourceSpec, stream_batches
from tests.snowflake_emulator import snowflake_emulator

SPEC = SourceSpec(integration="bench", table="USERS_SYNC", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("EXTERNAL_ID",),
                  columns=("UPDATED_AT", "EXTERNAL_ID", "PAYLOAD"))
FILL = """INSERT INTO USERS_SYNC
SELECT DATEADD(millisecond, FLOOR(i / 4), '2024-01-01'::TIMESTAMP_NTZ),
       'u' || LPAD(i::VARCHAR, 8, '0'),
       PARSE_JSON('{"plan":"free","n":' || i::VARCHAR || ',"country":"DE","score":12.5}')
FROM (SELECT seq4() AS i FROM TABLE(GENERATOR(ROWCOUNT => %d)))"""


def read(engine: sa.Engine, reader: str) -> tuple[int, float]:
    started = time.perf_counter()
    rows = sum(b.num_rows for b in stream_batches(
        engine, replace(SPEC, reader=reader), Window(start=None, signpost=None), 10_000))
    return rows, time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    with snowflake_emulator() as emulator:
        emulator.execute("CREATE OR REPLACE TABLE USERS_SYNC (UPDATED_AT TIMESTAMP_NTZ, "
                         "EXTERNAL_ID VARCHAR, PAYLOAD VARIANT)", FILL % args.rows)
        engine = emulator.engine()
        rates: dict[str, list[float]] = {"sqlalchemy": [], "auto": []}
        for _ in range(args.runs):
            for reader, found in rates.items():
                rows, seconds = read(engine, reader)
                assert rows == args.rows, (reader, rows)
                found.append(rows / seconds)
                print(f"{reader:>10}: {rows:,} rows in {seconds:.2f} s = {rows / seconds:,.0f} "
                      "rows/s", flush=True)
        medians = {reader: statistics.median(found) for reader, found in rates.items()}
        for reader, rate in medians.items():
            print(f"median {reader:>10}: {rate:,.0f} rows/s")
        print(f"auto / sqlalchemy: {medians['auto'] / medians['sqlalchemy']:.2f}x")
        engine.dispose()


if __name__ == "__main__":
    main()
