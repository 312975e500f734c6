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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.read_rates import compare

from engage_sync.read.extract import SourceSpec
from tests.snowflake_emulator import snowflake_emulator

SPEC = SourceSpec(integration="bench", table="USERS_SYNC", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("EXTERNAL_ID",),
                  columns=("UPDATED_AT", "EXTERNAL_ID", "PAYLOAD"))
FILL = """INSERT INTO USERS_SYNC
SELECT DATEADD(millisecond, FLOOR(i / 4), '2024-01-01'::TIMESTAMP_NTZ),
       'u' || LPAD(i::VARCHAR, 8, '0'),
       PARSE_JSON('{"plan":"free","n":' || i::VARCHAR || ',"country":"DE","score":12.5}')
FROM (SELECT seq4() AS i FROM TABLE(GENERATOR(ROWCOUNT => %d)))"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    with snowflake_emulator() as emulator:
        emulator.execute("CREATE OR REPLACE TABLE USERS_SYNC (UPDATED_AT TIMESTAMP_NTZ, "
                         "EXTERNAL_ID VARCHAR, PAYLOAD VARIANT)", FILL % args.rows)
        engine = emulator.engine()
        compare(engine, SPEC, args.rows, args.runs, "Arrow")
        engine.dispose()


if __name__ == "__main__":
    main()
