"""The window's SQL (extract.build_query) without a database: the compound-cursor predicate is
evaluated on Python rows by walking the SQLAlchemy expression, and must select exactly the
rows a tuple comparison selects; the compiled text keeps the byte-order collation."""

from __future__ import annotations

import operator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import elements, operators

from engage_sync.cursor.null_keys import NULL_KEY, position_value
from engage_sync.cursor.window import Window
from engage_sync.read.extract import SourceSpec, build_query

SPEC = SourceSpec(integration="t", table="src", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("K1", "K2"),
                  columns=("UPDATED_AT", "K1", "K2", "PAYLOAD"))
RESOLVED = {c: c.lower() for c in SPEC.columns}
OPS = {operator.gt: operator.gt, operator.ge: operator.ge, operator.lt: operator.lt,
       operator.le: operator.le, operator.eq: operator.eq}


def evaluate(clause: Any, row: dict[str, Any]) -> bool:
    """The truth of a WHERE clause built from columns, bound values, comparisons, AND, OR."""
    if isinstance(clause, elements.BooleanClauseList):
        parts = [evaluate(c, row) for c in clause.clauses]
        return all(parts) if clause.operator is operator.and_ else any(parts)
    if isinstance(clause, elements.Grouping):
        return evaluate(clause.element, row)
    assert isinstance(clause, elements.BinaryExpression), type(clause)
    left = row[clause.left.name]
    if clause.operator in (operators.is_, operators.is_not):  # IS NULL, IS NOT NULL
        return (left is None) == (clause.operator is operators.is_)
    right = clause.right.value
    if left is None or right is None:  # SQL: a comparison with NULL is not true
        return False
    return bool(OPS[clause.operator](left, right))


def selected(window: Window, rows: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    where = build_query(SPEC, RESOLVED, window).whereclause
    named = [dict(zip(("updated_at", "k1", "k2"), r, strict=True)) for r in rows]
    return [r for r, n in zip(rows, named, strict=True)
            if where is None or evaluate(where, n)]


row = st.tuples(st.integers(0, 4), st.sampled_from(["", "a", "B", "b", "é"]), st.integers(0, 2))


@given(st.lists(row, max_size=30, unique=True), st.one_of(st.none(), row),
       st.one_of(st.none(), st.integers(0, 4)), st.one_of(st.none(), st.integers(0, 4)),
       st.one_of(st.none(), st.integers(0, 5)))
def test_the_predicate_selects_exactly_the_rows_after_the_cursor_inside_the_bounds(
    rows: list[tuple[int, str, int]], start: tuple[int, str, int] | None,
    signpost: int | None, floor: int | None, before: int | None,
) -> None:
    window = Window(start=start, signpost=signpost, floor=floor, before=before)
    expected = [r for r in rows
                if (start is None or r > start) and (signpost is None or r[0] <= signpost)
                and (floor is None or r[0] >= floor) and (before is None or r[0] < before)]
    assert selected(window, rows) == expected


def test_ties_on_updated_at_are_split_by_the_key() -> None:
    rows = [(1, "a", 0), (1, "a", 1), (1, "b", 0), (2, "", 0)]
    assert selected(Window(start=(1, "a", 0), signpost=None), rows) == rows[1:]


def test_postgresql_orders_text_columns_by_bytes_and_keeps_the_cursor_order() -> None:
    query = build_query(SPEC, RESOLVED, Window(start=(1, "a", 0), signpost=9),
                        binary=frozenset({"K1"}))
    sql = str(query.compile(dialect=postgresql.dialect()))
    assert 'ORDER BY updated_at, (k1 COLLATE "C") NULLS FIRST, k2 NULLS FIRST' in sql
    assert '(k1 COLLATE "C") > ' in sql and "updated_at <= " in sql
    assert "FROM src" in sql


def _position(r: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(position_value(v) for v in r)


nullable_row = st.tuples(st.integers(0, 3), st.sampled_from([None, "", "a", "b"]),
                         st.sampled_from([None, 0, 1]))


@given(st.lists(nullable_row, max_size=30, unique=True), nullable_row)
def test_null_keys_sort_first_in_sql_as_in_python(
    rows: list[tuple[Any, ...]], start: tuple[Any, ...],
) -> None:
    """A stored cursor holding a NULL key (NULL_KEY) still selects every row
    after it, and NULL keys order the same in the predicate and in Python."""
    cursor = _position(start)
    expected = [r for r in rows if _position(r) > cursor]
    assert selected(Window(start=cursor, signpost=None), rows) == expected


def test_a_cursor_ending_in_a_null_key_keeps_the_rows_after_it_at_its_time() -> None:
    rows = [(1, None, 0), (1, "a", 0), (2, None, None)]
    assert selected(Window(start=(1, NULL_KEY, 0), signpost=None), rows) == rows[1:]
    assert sorted(map(_position, rows)) == list(map(_position, rows))
