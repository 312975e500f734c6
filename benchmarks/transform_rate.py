"""Transform rate: rows per second of `transform_batch` on a 100,000-row Arrow batch.

Cases: attributes in the payload format (~5 attributes in a JSON PAYLOAD), attributes in the
mapped format (5 columns), and events in the payload format. Reports the median of 5 runs.

    .venv/bin/python benchmarks/transform_rate.py [--rows N] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
import pyarrow as pa

from engage_sync.config.files import parse_integration
from engage_sync.kinds.track_transform import transform_batch

START = datetime(2024, 1, 1, tzinfo=UTC)


def _times(rows: int) -> pa.Array:
    return pa.array([START + timedelta(milliseconds=i) for i in range(rows)], pa.timestamp("us"))


def attributes_payload(rows: int) -> tuple[dict[str, object], pa.RecordBatch]:
    payloads = [
        orjson.dumps({"first_name": f"Name{i}", "plan": "gold", "score": i % 1000,
                      "vip": i % 2 == 0, "ltv": i * 0.25}).decode()
        for i in range(rows)
    ]
    batch = pa.record_batch({
        "UPDATED_AT": _times(rows),
        "EXTERNAL_ID": pa.array([f"user-{i}" for i in range(rows)]),
        "PAYLOAD": pa.array(payloads),
    })
    return {"kind": "attributes", "source": {"table": "t"}}, batch


def attributes_mapped(rows: int) -> tuple[dict[str, object], pa.RecordBatch]:
    batch = pa.record_batch({
        "UPDATED_AT": _times(rows),
        "USER_ID": pa.array([f"user-{i}" for i in range(rows)]),
        "FIRST_NAME": pa.array([f"Name{i}" for i in range(rows)]),
        "PLAN": pa.array(["gold"] * rows),
        "SCORE": pa.array([i % 1000 for i in range(rows)], pa.int64()),
        "VIP": pa.array([i % 2 == 0 for i in range(rows)]),
        "LTV": pa.array([i * 0.25 for i in range(rows)], pa.float64()),
    })
    mapping = {"identifier": {"external_id": "USER_ID"},
               "attributes": {"FIRST_NAME": "first_name", "PLAN": "plan", "SCORE": "score",
                              "VIP": "vip", "LTV": "ltv"}}
    return {"kind": "attributes", "source": {"table": "t"}, "mapping": mapping}, batch


def events_payload(rows: int) -> tuple[dict[str, object], pa.RecordBatch]:
    payloads = [
        orjson.dumps({"name": "played", "properties": {"song": f"s{i % 97}", "seconds": i % 300,
                                                       "shuffle": True}}).decode()
        for i in range(rows)
    ]
    batch = pa.record_batch({
        "UPDATED_AT": _times(rows),
        "EXTERNAL_ID": pa.array([f"user-{i}" for i in range(rows)]),
        "PAYLOAD": pa.array(payloads),
    })
    return {"kind": "events", "source": {"table": "t"}}, batch


CASES: dict[str, Callable[[int], tuple[dict[str, object], pa.RecordBatch]]] = {
    "attributes, payload format (5 attributes)": attributes_payload,
    "attributes, mapped format (5 columns)": attributes_mapped,
    "events, payload format (name + 3 properties, time from UPDATED_AT)": events_payload,
}


def measure(case: Callable[[int], tuple[dict[str, object], pa.RecordBatch]], rows: int,
            repeat: int) -> float:
    raw, batch = case(rows)
    integration = parse_integration(raw, file="bench.yaml")
    rates = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = transform_batch(integration, batch, 0)
        rates.append(rows / (time.perf_counter() - began))
        assert len(result.items) == rows, result.rejects[:3]
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, case in CASES.items():
        print(f"{name}: {measure(case, args.rows, args.repeat):,.0f} rows/s "
              f"(median of {args.repeat}, {args.rows:,} rows)")


if __name__ == "__main__":
    main()
