"""The run's pending table, made in the warehouse from the comparison's selects (`compare`), and
the snapshot's stale row digests brought up to date.

Invariants:
- each join that may hold every user is a statement and a work table of its own (the users
  whose row digest differs; their values; what to send of each): when every user differs (a
  first run, a snapshot digested otherwise), joins of the whole model in one statement hold
  their hash tables at once, beyond DuckDB's memory limit;
- on DuckDB the joins of the differing users (with the model, for their values; with the
  snapshot, for its attribute digests) run in slices of at most `compare.SLICE_USERS` users
  (by the hash of the first identifier, on both sides): on a first run every user differs,
  and two sides of every user do not fit its memory limit even spilled;
- on DuckDB the pending rows are numbered as its scan reads them (a streaming window: its
  ordered window over a whole first run cannot spill, and its sort of every user's values
  does not fit its memory limit either), the leavers after every other user; elsewhere the
  window numbers them (leavers last, in identifier order). Either order is made once, so a
  resumed run reads the same rows in the same order;
- the work tables are dropped once the pending table is made; a run killed meanwhile leaves
  them, and the next one drops them first.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engage_sync.read.source_spec import SourceSpec
from engage_sync.snapshot import compare
from engage_sync.snapshot.compare import (
    CreateTableAs,
    Part,
    differ_select,
    in_slice,
    order,
    sends_select,
    wanted,
    with_values,
)
from engage_sync.snapshot.layout import CHANGE, CHANGED, LEFT, ROW, SEQ, Layout


def make_pending(conn: Connection, layout: Layout, spec: SourceSpec, resolved: dict[str, str],
                 on_leave: str) -> None:
    """The run's pending changes, made anew (what a finished run left is replaced)."""
    pending, compared = layout.pending(), layout.compared()
    differing = layout.work("dif", (CHANGE, *layout.ids, ROW))
    valued = layout.work("val", (CHANGE, *layout.ids, *(a.column for a in layout.attributes),
                                 ROW))
    work = (differing, valued, compared)
    for table in (pending, *work):
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_name(conn, layout, table)}")
    conn.execute(CreateTableAs(_name(conn, layout, differing),
                               differ_select(layout, spec, resolved, layout.snapshot())))
    users = conn.execute(sa.select(sa.func.count()).select_from(differing)).scalar_one()
    parts = compare.parts(conn, users)
    for k, part in enumerate(parts):
        values = with_values(layout, spec, resolved, differing, part)
        _write(conn, layout, valued, sa.select(*values.c), first=k == 0)
    _compare(conn, layout, valued, compared, on_leave, parts)
    _refresh_row_digests(conn, layout, compared, on_leave)
    if conn.dialect.name == "duckdb":
        _number_as_scanned(conn, layout, compared, pending, on_leave)
    else:
        seq = sa.func.row_number().over(order_by=order(layout, compared.c))
        conn.execute(CreateTableAs(_name(conn, layout, pending), sa.select(
            seq.label(SEQ), *compared.c).where(wanted(layout, compared.c, on_leave))))
    for table in work:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_name(conn, layout, table)}")


def _write(conn: Connection, layout: Layout, table: sa.TableClause, select: sa.Select[Any],
           first: bool) -> None:
    """`select`'s rows into the work table: made by the first slice, added to by the others."""
    if first:
        conn.execute(CreateTableAs(_name(conn, layout, table), select))
    else:
        conn.execute(table.insert().from_select(list(table.c.keys()), select))


def _compare(conn: Connection, layout: Layout, valued: sa.TableClause,
             compared: sa.TableClause, on_leave: str,
             parts: list[Part]) -> None:
    """The differing users with what to send of each, written to `compared`, slice by slice
    (see the module's invariants)."""
    held, first = layout.snapshot(), layout.ids[0]
    for k, part in enumerate(parts):
        rows = in_slice(valued, first, part, "engage_slice")
        old = in_slice(held.alias("engage_old"), first, part, "engage_old_slice")
        _write(conn, layout, compared, sends_select(layout, rows, old, on_leave), first=k == 0)


def _number_as_scanned(conn: Connection, layout: Layout, compared: sa.TableClause,
                       pending: sa.TableClause, on_leave: str) -> None:
    """DuckDB's pending rows numbered in the order its scan reads them (a streaming window,
    no sort), the leavers after every other user."""
    todo = wanted(layout, compared.c, on_leave)
    conn.execute(CreateTableAs(_name(conn, layout, pending), sa.select(
        sa.func.row_number().over().label(SEQ), *compared.c).where(
        todo, compared.c[CHANGE] != LEFT)))
    staying = conn.execute(sa.select(sa.func.count()).select_from(pending)).scalar_one()
    conn.execute(pending.insert().from_select(list(pending.c.keys()), sa.select(
        (sa.func.row_number().over() + staying).label(SEQ), *compared.c).where(
        todo, compared.c[CHANGE] == LEFT)))


def _refresh_row_digests(conn: Connection, layout: Layout, rows: sa.TableClause,
                         on_leave: str) -> None:
    """A user whose row digest differs but with nothing to send holds the snapshot's values:
    its snapshot row takes the new row digest, or every later run would compare it again."""
    stale = sa.and_(rows.c[CHANGE] == CHANGED, sa.not_(wanted(layout, rows.c, on_leave)))
    if not conn.execute(sa.select(sa.func.count()).select_from(rows).where(stale)).scalar():
        return
    held = layout.snapshot()
    conn.execute(held.update().values({ROW: rows.c[ROW]}).where(
        *(held.c[c] == rows.c[c] for c in layout.ids), stale))


def _name(conn: Connection, layout: Layout, table: sa.TableClause) -> str:
    return layout.quoted(conn.dialect, table.name)
