"""A DuckDB window whose rows count their user's later rows (`LATER_ROWS`, mapped attributes
with `superseded_rows: skip`) read in slices of its cursor, as `duckdb_slices` reads the rest.

Counting later rows over the whole window in one query sorts it whole: under DuckDB's default
128 MB, 2,500,000 rows of ≈ 90 bytes read and 5,000,000 ran out of memory. In slices, a row's
later rows are in its own slice or in a later one (slices are cut by cursor value, rows tied on
it share a slice): the window function counts those in its slice (it runs after the slice's
WHERE), and a temporary table of the users with more than one row in the window, each with its
newest cursor, says whether one lies beyond the slice's upper bound (a GROUP BY, which DuckDB
spills: 20,000,000 users under 128 MB).

Invariants:
- a row's LATER_ROWS is 0 exactly when the window read in one query gives it 0 (it is its
  user's last row in the window), and more than 0 otherwise; not the same count (the reader
  asks only whether a later row exists);
- as the whole query ranks them (DuckDB orders NULLs last, DESC too), a NULL cursor is older
  than every cursor: a row with a NULL cursor (read last, in the last slice) has a later row
  when its user has any row with a cursor; NULLs never count as beyond a slice;
- the table is built from the same window (the same WHERE: a resumed run counts only what it
  reads again), lives on the read's connection, and is dropped when the read ends, however
  it ends; its columns are named `engage_later_*` so that the correlated subquery's unqualified
  source columns can only mean the source's;
- a window of at most `SLICE_ROWS` rows is read as one query, without the table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engage_sync.read import duckdb_slices

TABLE = "engage_later_users"
LAST = "engage_later_last"
BOUND = "engage_later_bound"
"""The bind parameter of a slice's upper bound (None for the last slice)."""


def _user(n: int) -> str:
    return f"engage_later_user_{n}"


def beyond(user: list[sa.ColumnElement[Any]], cursor: sa.ColumnElement[Any]
           ) -> sa.ColumnElement[Any]:
    """1 when the row's user has a later row beyond the slice (a newer cursor at or past its
    upper bound `BOUND`; for a row with a NULL cursor, any cursor), else 0: a `extract.Beyond`
    over `TABLE`."""
    users = sa.table(TABLE, *(sa.column(_user(n)) for n in range(len(user))), sa.column(LAST))
    last = users.c[LAST]
    same = [users.c[_user(n)].is_not_distinct_from(u) for n, u in enumerate(user)]
    newer = sa.case((cursor.is_(None), last.is_not(None)),
                    else_=last >= sa.bindparam(BOUND))
    found = sa.exists().where(*same, newer).correlate_except(users)  # the source: outer
    return sa.case((found, 1), else_=0)


def slices(conn: Connection, plain: sa.Select[Any], whole: sa.Select[Any],
           sliced: sa.Select[Any], cursor: str, user: Sequence[str],
           slice_rows: int | None = None) -> Generator[sa.Select[Any]]:
    """The queries of the window's slices, in order: `whole` (LATER_ROWS over the whole
    window) when it is read as one query (`duckdb_slices.plan`), else `sliced` (LATER_ROWS
    with `beyond`) restricted to each slice, its upper bound bound, with `TABLE` built from
    `plain` (the window without LATER_ROWS; selects `cursor` and the `user` columns) while they
    are read."""
    bounds = duckdb_slices.plan(conn, plain, cursor, slice_rows)
    if bounds is None:
        yield whole
        return
    _build(conn, plain, cursor, user)
    try:
        parts = duckdb_slices.sliced(sliced, cursor, bounds)
        for part, upper in zip(parts, [*bounds, None], strict=True):
            yield part.params({BOUND: upper})
    finally:
        # the next read replaces it anyway: a failure here must not hide the read's own
        with contextlib.suppress(Exception):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")


def _build(conn: Connection, plain: sa.Select[Any], cursor: str, user: Sequence[str]) -> None:
    window = plain.order_by(None).subquery("engage_window")
    users = (sa.select(*(window.c[u].label(_user(n)) for n, u in enumerate(user)),
                       sa.func.max(window.c[cursor]).label(LAST))
             .group_by(*(window.c[u] for u in user))
             .having(sa.func.count() > 1))
    sql, params = duckdb_slices.driver_sql(conn, users)
    raw = conn.connection.driver_connection
    assert raw is not None
    raw.execute(f"CREATE OR REPLACE TEMP TABLE {TABLE} AS {sql}", params)
