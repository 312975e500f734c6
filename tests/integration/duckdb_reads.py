"""A DuckDB read's queries counted, for the tests of its slices."""

from __future__ import annotations

from typing import Any

import pytest

from engage_sync.read import duckdb_slices, extract


def count_reads(monkeypatch: pytest.MonkeyPatch, slice_rows: int) -> list[int]:
    """Slices of `slice_rows` rows; the returned list grows by one for each query a read
    sends to DuckDB for batches."""
    monkeypatch.setattr(duckdb_slices, "SLICE_ROWS", slice_rows)
    sent: list[int] = []
    read = extract._duckdb_batches

    def counted(*args: Any) -> Any:
        sent.append(1)
        return read(*args)

    monkeypatch.setattr(extract, "_duckdb_batches", counted)
    return sent
