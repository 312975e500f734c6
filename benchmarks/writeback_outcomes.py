"""The write-back of one run with 10,000 outcomes into DuckDB, timed 5 times.

A DuckDB warehouse of 10,000 rows, every one rejected (an invalid `email_subscribe`), is
synced once with `writeback: {}` (nothing reaches the service: every row is rejected before
sending); then `writer._write_run` writes that run's record and its 10,000 outcome rows again,
5 times (each write replaces the last), and the median is printed.

    .venv/bin/python benchmarks/writeback_outcomes.py WORKDIR
"""

import os
import statistics
import sys
import time
from pathlib import Path

import duckdb
import yaml

from engage_sync.adapters.resources import open_state, writeback_engine
from engage_sync.adapters.wiring import sync_file
from engage_sync.config.files import load_integration
from engage_sync.config.run_options import RunOptions
from engage_sync.read.plan import prepare
from engage_sync.writeback import writer

ROWS = 10_000


def main(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    wh = work / "wh.duckdb"
    con = duckdb.connect(str(wh))
    con.execute(
        "CREATE OR REPLACE TABLE USERS_SYNC AS SELECT TIMESTAMP '2026-01-01' "
        "+ to_microseconds(i * 1000) AS UPDATED_AT, 'u' || lpad(i::VARCHAR, 7, '0') "
        "AS EXTERNAL_ID, '{\"email_subscribe\": \"bogus\"}' AS PAYLOAD FROM range(?) t(i)",
        [ROWS])
    con.close()
    path = work / "users.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{wh}"},
        "source": {"table": "USERS_SYNC"}, "service": {"base_url": "http://127.0.0.1:9"},
        "writeback": {}}))
    os.environ["ENGAGE_API_KEY"] = "not-used"  # every row is rejected before sending
    store = open_state(f"sqlite:///{work / 'state.db'}")
    record = sync_file(path, store=store).record
    assert record is not None and record["rows_rejected"] == ROWS, record
    integration = load_integration(path)
    times = []
    with writeback_engine(integration) as engine:
        keys = writer.key_names(prepare(integration, RunOptions()), engine, writeback_engine)
        for _ in range(5):
            started = time.perf_counter()
            writer._write_run(engine, integration, store, record["run_id"], keys)
            times.append(time.perf_counter() - started)
    print(f"write-back of {ROWS:,} outcomes: median {statistics.median(times):.3f} s "
          f"({', '.join(f'{t:.3f}' for t in times)})")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
