"""A DuckDB window whose rows count their user's later rows (`LATER_ROWS`, mapped attributes
with `superseded_rows: skip`), or their earlier and other rows (`EARLIER_ROWS`, `OTHER_ROWS`:
rows merged, the payload format), read in slices of its cursor, as `duckdb_slices` reads the
rest.

Counting later rows over the whole window in one query sorts it whole, which runs out of
memory on a large window under engage-sync's default limit of 128 MB (`benchmarks/duckdb_cap.py
--later-rows`, figures in benchmarks/README.md). In
slices, a row's later rows are the rows of its user with a newer cursor, or with the same
cursor and a greater key, which share its slice (slices are cut by cursor value): the window
function counts those in its slice (it runs after the slice's WHERE), and a temporary table of
the users with more than one row in the window, each with its newest cursor, says whether the
user has a newer cursor anywhere in the window (a GROUP BY, which DuckDB spills to disk, so it
stays under the limit however many users the window holds).

Invariants:
- a row's LATER_ROWS is 0 exactly when the window read in one query gives it 0 (it is its
  user's last row in the window), and more than 0 otherwise; not the same count (the reader
  asks only whether a later row exists);
- as the whole query ranks them (DuckDB orders NULLs last, DESC too), a NULL cursor is older
  than every cursor: a row with a NULL cursor (read last, in the last slice) has a later row
  when its user has any row with a cursor;
- the table and the slices see the same rows: the table is built from the same window (the
  same WHERE: a resumed run counts only what it reads again), and the read is one transaction
  of its connection (duckdb_engine begins one), one snapshot of the file;
- the table has a name of its own for each read (no source table can be shadowed by it),
  lives on the read's connection, and is dropped when the read ends, however it ends; the
  correlated subquery names the source's columns by its table (a lone "USER" in a subquery is
  DuckDB's current_user);
- a window of at most `SLICE_ROWS` rows is read as one query, without the table;
- merged rows (`SourceSpec.merged`) are counted the same way, in the read's order: a row's
  EARLIER_ROWS is 0 exactly when no row of its user is read before it (none in its slice, by
  the window function over the slice's ORDER BY, and none in an earlier slice: the table's
  oldest cursor of the user, `FIRST`, is older than the row's; a NULL cursor is read last, so
  any cursor is read before it), and its OTHER_ROWS is 0 exactly when the user has one row in
  the window (none other in its slice, and the user is not in the table).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Generator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engage_sync.read import duckdb_slices

LAST = "engage_later_last"
FIRST = "engage_later_first"


def _user(n: int) -> str:
    return f"engage_later_user_{n}"


def table_name() -> str:
    """A name for one read's temporary table, unlike any other's."""
    return f"engage_later_users_{uuid.uuid4().hex[:12]}"


def beyond(table: str, user: list[sa.ColumnElement[Any]], cursor: sa.ColumnElement[Any]
           ) -> sa.ColumnElement[Any]:
    """1 when the row's user has a newer cursor in the window (for a row with a NULL cursor,
    any cursor), by `table`, else 0: with `table` bound, an `extract.Beyond` (as are `before`
    and `elsewhere`)."""
    users = sa.table(table, *(sa.column(_user(n)) for n in range(len(user))), sa.column(LAST))
    last = users.c[LAST]
    same = [users.c[_user(n)].is_not_distinct_from(u) for n, u in enumerate(user)]
    newer = sa.case((cursor.is_(None), last.is_not(None)), else_=last > cursor)
    found = sa.exists().where(*same, newer).correlate_except(users)  # the source: outer
    return sa.case((found, 1), else_=0)


def before(table: str, user: list[sa.ColumnElement[Any]], cursor: sa.ColumnElement[Any]
           ) -> sa.ColumnElement[Any]:
    """1 when the read gives a row of the row's user in an earlier slice: an older cursor in
    the window (for a row with a NULL cursor, read last, any cursor), by `table`, else 0."""
    users = sa.table(table, *(sa.column(_user(n)) for n in range(len(user))), sa.column(FIRST))
    first = users.c[FIRST]
    same = [users.c[_user(n)].is_not_distinct_from(u) for n, u in enumerate(user)]
    older = sa.case((cursor.is_(None), first.is_not(None)), else_=first < cursor)
    found = sa.exists().where(*same, older).correlate_except(users)
    return sa.case((found, 1), else_=0)


def elsewhere(table: str, user: list[sa.ColumnElement[Any]], _cursor: sa.ColumnElement[Any]
              ) -> sa.ColumnElement[Any]:
    """1 when the row's user has more than one row in the window (it is in `table`), else 0."""
    users = sa.table(table, *(sa.column(_user(n)) for n in range(len(user))))
    same = [users.c[_user(n)].is_not_distinct_from(u) for n, u in enumerate(user)]
    found = sa.exists().where(*same).correlate_except(users)
    return sa.case((found, 1), else_=0)


def slices(conn: Connection, table: str, plain: sa.Select[Any], whole: sa.Select[Any],
           sliced: sa.Select[Any], cursor: str, user: Sequence[str], counted: Sequence[str],
           slice_rows: int | None = None) -> Generator[sa.Select[Any]]:
    """The queries of the window's slices, in order: `whole` (the `counted` columns over the
    whole window) when it is read as one query (`duckdb_slices.plan`), else `sliced` (with
    `beyond`, or `before` and `elsewhere`, over `table`) restricted to each slice, with
    `table` built from `plain` (the window without the counted columns; selects `cursor` and
    the `user` columns) while they are read. When no user has more than one row in the
    window (`table` is empty), every count is 0: the slices read `plain` with zeros instead,
    without the window function and the lookups."""
    bounds = duckdb_slices.plan(conn, plain, cursor, slice_rows)
    if bounds is None:
        yield whole
        return
    _build(conn, table, plain, cursor, user)
    try:
        if conn.exec_driver_sql(f"SELECT count(*) FROM {table}").all()[0][0]:
            yield from duckdb_slices.sliced(sliced, cursor, bounds)
        else:
            zeros = (sa.cast(sa.literal(0), sa.BigInteger).label(c) for c in counted)
            yield from duckdb_slices.sliced(plain.add_columns(*zeros), cursor, bounds)
    finally:
        # the read's rollback would drop it too: a failure here must not hide the read's own
        with contextlib.suppress(Exception):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def _build(conn: Connection, table: str, plain: sa.Select[Any], cursor: str,
           user: Sequence[str]) -> None:
    window = plain.order_by(None).subquery("engage_window")
    users = (sa.select(*(window.c[u].label(_user(n)) for n, u in enumerate(user)),
                       sa.func.max(window.c[cursor]).label(LAST),
                       sa.func.min(window.c[cursor]).label(FIRST))
             .group_by(*(window.c[u] for u in user))
             .having(sa.func.count() > 1))
    sql, params = duckdb_slices.driver_sql(conn, users)
    conn.exec_driver_sql(f"CREATE TEMP TABLE {table} AS {sql}", tuple(params))
