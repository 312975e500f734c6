"""The row digest the snapshot comparison joins on: rows that differ in any attribute differ in
digest (a NULL against an empty text, a text moved across attributes), computed by DuckDB."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from engage_sync.snapshot.row_digest import row_digest


def _digests(rows: list[tuple[Any, ...]]) -> list[Any]:
    engine = sa.create_engine("duckdb:///:memory:")
    values = sa.values(sa.column("a", sa.String), sa.column("b", sa.String), name="v").data(rows)
    with engine.connect() as conn:
        return [d for (d,) in conn.execute(sa.select(row_digest([values.c.a, values.c.b])))]


def test_rows_that_differ_in_any_attribute_differ_in_digest() -> None:
    rows = [("a", None), ("a", ""), (None, "a"), ("ab", "c"), ("a", "bc"), (None, None)]
    digests = _digests(rows)
    assert len(set(digests)) == len(rows) and all(isinstance(d, int) for d in digests)
    assert _digests([("ab", "c")]) == [digests[3]]  # the same row, the same digest
