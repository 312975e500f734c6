"""The SQL terms of a window's query that are neither its source nor its columns: the compound
cursor's comparison (NULL keys first, as `cursor/null_keys.py` orders them) and how many rows of
the same user the query keeps before or after a row. Pure: they build expressions and run
nothing, so `read/extract.py` composes them into the read and the counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from engage_sync.cursor.null_keys import NULL_KEY
from engage_sync.cursor.progress import Cursor
from engage_sync.read.source_spec import EARLIER_ROWS, LATER_ROWS, OTHER_ROWS


def later_rows(user: list[sa.ColumnElement[Any]], order: list[sa.ColumnElement[Any]],
                outside: sa.ColumnElement[Any] | None = None) -> sa.ColumnElement[Any]:
    """How many rows of the same user follow this one in the window: computed over the rows
    the WHERE clause keeps, so a resumed run counts only what it reads again; plus `outside`,
    a term for the rows that follow beyond them (`build_query`'s `beyond`)."""
    # NULL keys last, as the read puts them first: a row with a NULL key is never latest
    rank = sa.func.row_number().over(partition_by=user, order_by=[
        order[0].desc(), *(o.desc().nulls_last() for o in order[1:])])
    later = rank - 1 if outside is None else rank - 1 + outside
    return later.label(LATER_ROWS)


def earlier_rows(user: list[sa.ColumnElement[Any]], sort: list[sa.ColumnElement[Any]],
                  outside: sa.ColumnElement[Any] | None = None) -> sa.ColumnElement[Any]:
    """How many rows of the same user the read gives before this one: ranked by the read's own
    ORDER BY (`sort`), so 0 is the user's first row read whatever the dialect does with
    NULLs; plus `outside`, 1 when such a row lies beyond the rows the query keeps."""
    rank = sa.func.row_number().over(partition_by=user, order_by=sort)
    earlier = rank - 1 if outside is None else rank - 1 + outside
    return earlier.label(EARLIER_ROWS)


def other_rows(user: list[sa.ColumnElement[Any]], outside: sa.ColumnElement[Any] | None = None
                ) -> sa.ColumnElement[Any]:
    """How many other rows of the same user the query keeps; plus `outside`, 1 when the user
    has more than one row in the window beyond them."""
    others = sa.func.count().over(partition_by=user) - 1
    return (others if outside is None else others + outside).label(OTHER_ROWS)


def _gt(column: sa.ColumnElement[Any], value: Any) -> sa.ColumnElement[bool]:
    """column > value, where NULL (NULL_KEY, or None in a cursor stored by an older version)
    sorts before every value."""
    if value is NULL_KEY or value is None:
        return column.is_not(None)
    return column > value


def _eq(column: sa.ColumnElement[Any], value: Any) -> sa.ColumnElement[bool]:
    return column.is_(None) if value is NULL_KEY or value is None else column == value


def after(order: Sequence[sa.ColumnElement[Any]], start: Cursor) -> sa.ColumnElement[bool]:
    """(c0, c1, ...) > (v0, v1, ...) as c0 > v0 OR (c0 = v0 AND (c1 > v1 OR ...)), NULL keys
    first (`null_keys`)."""
    if len(order) != len(start):
        raise ValueError("cursor and order columns differ in length")
    clause: sa.ColumnElement[bool] = _gt(order[-1], start[-1])
    for column, value in zip(reversed(order[:-1]), reversed(start[:-1]), strict=True):
        clause = sa.or_(_gt(column, value), sa.and_(_eq(column, value), clause))
    return clause
