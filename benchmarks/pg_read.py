"""PostgreSQL read throughput: the window's rows as Arrow batches, through SQLAlchemy's
server-side cursor (`warehouse.reader: sqlalchemy`) and through ADBC (`auto`).

Starts a throwaway PostgreSQL server on 127.0.0.1 (Debian's binaries, as the tests do), fills
a table of N rows in the service's sync format, then reads the whole window with each reader,
alternating, `--runs` times each, and prints rows/s per run and the medians.

    .venv/bin/python benchmarks/pg_read.py [--rows 1000000] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.read_rates import compare

from engage_sync.read.extract import SourceSpec
from tests.pg_server import postgres_server

SPEC = SourceSpec(integration="bench", table="users_sync", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("EXTERNAL_ID",),
                  columns=("UPDATED_AT", "EXTERNAL_ID", "PAYLOAD"))
FILL = """INSERT INTO users_sync
SELECT timestamp '2024-01-01' + (i / 4) * interval '1 millisecond',
       'u' || lpad(i::text, 8, '0'),
       '{"plan":"free","n":' || i || ',"country":"DE","score":12.5,"active":true}'
FROM generate_series(0, %d) i"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    with postgres_server() as url:
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE users_sync "
                                 "(updated_at timestamp, external_id text, payload text)")
            conn.exec_driver_sql(FILL % (args.rows - 1))
            conn.exec_driver_sql("ANALYZE users_sync")
        compare(engine, SPEC, args.rows, args.runs, "ADBC")
        engine.dispose()


if __name__ == "__main__":
    main()
