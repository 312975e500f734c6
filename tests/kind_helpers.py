"""Helpers for the kind tests: an integration of a kind, and one batch of rows run through
its Kind (transform, then packer)."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from engage_sync import kinds
from engage_sync.config.files import parse_integration
from engage_sync.config.integration import Integration
from engage_sync.items import TransformResult
from engage_sync.pack.batching import Batch

MARK = "§"
"""Marks generated values, so a test can tell that a reason never echoes one."""
SUBS = {"user": {"external_id": "EXTERNAL_ID", "email": "EMAIL", "phone": "PHONE"},
        "group_column": "GROUP_ID", "state_column": "STATE"}


def integration(kind: str, section: dict[str, Any] | None = None, **extra: Any) -> Integration:
    raw: dict[str, Any] = {"kind": kind, "source": {"table": "t"}, **extra}
    if section is not None:
        raw[kind] = section
    return parse_integration(raw, file=f"{kind}.yaml")


def run(i: Integration, columns: dict[str, list[Any]]) -> tuple[TransformResult, list[Batch]]:
    n = len(next(iter(columns.values())))
    batch = pa.RecordBatch.from_pydict({"UPDATED_AT": list(range(n)), **columns})
    result = kinds.kind_of(i).transform(i, batch, 100)
    assert sorted([x.seq for x in result.items] + [r.seq for r in result.rejects]) == \
        list(range(100, 100 + n))
    packer = kinds.kind_of(i).packer(i)
    batches = [b for b in (packer.add(x) for x in result.items) if b is not None]
    last = packer.flush()
    return result, batches + ([last] if last else [])


def bodies(batches: list[Batch]) -> list[dict[str, Any]]:
    return [orjson.loads(b.body) for b in batches]
