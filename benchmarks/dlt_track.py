"""The first load of `benchmarks/user_command.py`'s attributes table written with dlt, for the
`dlt` path of that benchmark (the two compared in one sitting).

A dlt resource reads the DuckDB table in chunks of 10,000 rows, incremental on UPDATED_AT
(a first run reads everything; dlt's `sql_table` source cannot reflect a table with DuckDB 2.0
through duckdb-engine 0.17), and a custom destination of 75 rows a call posts
each call's rows to /users/track as one request of 75 attribute objects (the identifier and the
PAYLOAD's attributes), keeping the service's limit of 3,000 requests in any 3 s. It prints one
JSON line at the end, as `engage-sync run` prints its status record: the rows read and
`job_status`.

It runs in its own environment (dlt is not a dependency of engage-sync):

    python3 -m venv .dlt-venv
    .dlt-venv/bin/pip install dlt==1.31.0 duckdb==2.0.1 httpx orjson
    .venv/bin/python benchmarks/user_command.py --paths dlt,no-prefect \
        --dlt-python .dlt-venv/bin/python

    .dlt-venv/bin/python benchmarks/dlt_track.py --warehouse W.duckdb --base-url URL --workdir DIR
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import threading
import time
from typing import Any

import dlt
import duckdb
import httpx
import orjson

LIMIT, PERIOD = 3_000, 3.0  # /users/track: 3,000 requests per 3 s


class Budget:
    """At most LIMIT sends in any PERIOD seconds, for every thread of the process."""

    def __init__(self) -> None:
        self.sent: collections.deque[float] = collections.deque()
        self.lock = threading.Lock()

    def acquire(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                while self.sent and now - self.sent[0] >= PERIOD:
                    self.sent.popleft()
                if len(self.sent) < LIMIT:
                    self.sent.append(now)
                    return
                wait = PERIOD - (now - self.sent[0])
            time.sleep(wait)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", required=True)
    p.add_argument("--table", default="USERS_SYNC")
    p.add_argument("--base-url", required=True)
    p.add_argument("--workdir", required=True, help="dlt's pipelines folder")
    p.add_argument("--jobs", type=int, default=4, help="load jobs in parallel")
    args = p.parse_args()
    client = httpx.Client(base_url=args.base_url, timeout=30, headers={
        "Authorization": f"Bearer {os.environ['ENGAGE_API_KEY']}",
        "Content-Type": "application/json"})
    budget, sent = Budget(), [0]

    @dlt.destination(batch_size=75, name="track", max_parallel_load_jobs=args.jobs,
                     loader_parallelism_strategy="parallel")
    def track(items: list[dict[str, Any]], table: dict[str, Any]) -> None:
        objs = []
        for row in items:
            payload = row["PAYLOAD"]
            attrs = orjson.loads(payload) if isinstance(payload, str | bytes) else payload
            objs.append({"external_id": row["EXTERNAL_ID"], **attrs})
        budget.acquire()
        client.post("/users/track", content=orjson.dumps({"attributes": objs})
                    ).raise_for_status()
        sent[0] += len(objs)

    @dlt.resource(name=args.table.lower())
    def rows(updated: Any = dlt.sources.incremental("UPDATED_AT")) -> Any:  # noqa: B008 (dlt's idiom)
        con = duckdb.connect(args.warehouse, read_only=True)
        start = updated.last_value
        where = "" if start is None else "WHERE UPDATED_AT >= ?"
        cur = con.execute(f"SELECT UPDATED_AT, EXTERNAL_ID, PAYLOAD FROM {args.table} {where} "
                          "ORDER BY UPDATED_AT, EXTERNAL_ID", [] if start is None else [start])
        names = ("UPDATED_AT", "EXTERNAL_ID", "PAYLOAD")
        while chunk := cur.fetchmany(10_000):
            yield [dict(zip(names, row, strict=True)) for row in chunk]
        con.close()

    pipeline = dlt.pipeline(pipeline_name="track_bench", destination=track,
                            pipelines_dir=args.workdir)
    pipeline.run(rows())
    print(json.dumps({"rows_read": sent[0], "job_status": "success"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
