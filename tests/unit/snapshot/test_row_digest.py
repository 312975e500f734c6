"""The row digest the snapshot comparison joins on: rows that differ in any attribute differ in
digest (a NULL against an empty text, a text moved across attributes), computed by DuckDB, and
by the MD5 form other warehouses get (SQLite here, through the key digest's function)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from engage_sync.read.key_digest import sqlite_md5
from engage_sync.snapshot.row_digest import row_digest


def _digests(rows: list[tuple[Any, ...]], url: str = "duckdb:///:memory:") -> list[Any]:
    engine = sa.create_engine(url)
    if url.startswith("sqlite"):
        sa.event.listen(engine, "connect", sqlite_md5)
    rows_sql = sa.union_all(*(
        sa.select(sa.cast(sa.literal(a), sa.String).label("a"),
                  sa.cast(sa.literal(b), sa.String).label("b"), sa.literal(i).label("i"))
        for i, (a, b) in enumerate(rows))).subquery("v")
    query = sa.select(row_digest(rows_sql.c.a, rows_sql.c.b)).order_by(rows_sql.c.i)
    with engine.connect() as conn:
        return [d for (d,) in conn.execute(query)]


def test_rows_that_differ_in_any_attribute_differ_in_digest() -> None:
    rows = [("a", None), ("a", ""), (None, "a"), ("ab", "c"), ("a", "bc"), (None, None), ("", None),
            (None, "")]
    digests = _digests(rows)
    assert len(set(digests)) == len(rows) and all(isinstance(d, int) for d in digests)
    assert _digests([("ab", "c")]) == [digests[3]]  # the same row, the same digest


def test_the_md5_form_is_sixteen_hex_digits_and_tells_rows_apart() -> None:
    rows = [("a", None), ("a", ""), (None, "a"), ("ab", "c"), ("a", "bc"), (None, None), ("", None),
            (None, "")]
    digests = _digests(rows, "sqlite://")
    assert len(set(digests)) == len(rows)
    assert all(isinstance(d, str) and len(d) == 16 and int(d, 16) >= 0 for d in digests)
