"""What the read benchmarks share: read a whole window with each reader, alternating, and
print rows/s per run, the medians and the ratio (`pg_read.py`, `snowflake_read.py`)."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import sqlalchemy as sa

from engage_sync.cursor.window import Window
from engage_sync.read.extract import SourceSpec, stream_batches


def read(engine: sa.Engine, spec: SourceSpec, reader: str) -> tuple[int, float]:
    """Rows read and seconds taken, the whole window in batches of 10,000 rows."""
    started = time.perf_counter()
    rows = sum(b.num_rows for b in stream_batches(
        engine, replace(spec, reader=reader), Window(start=None, signpost=None), 10_000))
    return rows, time.perf_counter() - started


def compare(engine: sa.Engine, spec: SourceSpec, rows: int, runs: int, arrow: str) -> None:
    """`runs` reads with each reader, alternating; `arrow` names the `auto` reader."""
    rates: dict[str, list[float]] = {"sqlalchemy": [], "auto": []}
    for _ in range(runs):
        for reader, found in rates.items():
            got, seconds = read(engine, spec, reader)
            assert got == rows, (reader, got)
            found.append(got / seconds)
            print(f"{reader:>10}: {got:,} rows in {seconds:.2f} s = {got / seconds:,.0f} "
                  "rows/s", flush=True)
    medians = {reader: statistics.median(found) for reader, found in rates.items()}
    for reader, rate in medians.items():
        print(f"median {reader:>10}: {rate:,.0f} rows/s")
    print(f"{arrow} / SQLAlchemy: {medians['auto'] / medians['sqlalchemy']:.1f}x")
