"""The comparison inside the warehouse: the model's whole result against the snapshot, kept as
the run's pending changes (a table), and their counts.

Invariants:
- no row leaves the warehouse here: the join, the digests and the numbering run in SQL, and
  only counts come back;
- the pending table is made once, when a run opens; a resumed run reads the same rows in the
  same order (`SEQ`), whatever the model holds by then;
- a user is pending when the snapshot does not hold it (new: its attributes with a value), when
  an attribute's digest differs from the snapshot's (changed: those attributes, a NULL one as
  a removal), or, with `on_leave` other than keep, when the model no longer returns it (left:
  `clear` removes each attribute the snapshot holds a value of, and only those); a user with
  nothing to send is not pending;
- the model and the snapshot are joined on the identifier and one row digest a user
  (`row_digest`), and nothing else, so the join that reads every user carries two columns a
  side; the model is then read again for the users whose row digest differs (new, changed,
  left), and their attribute digests computed and the snapshot's read for them only;
- a user whose row digest differs with nothing to send (a snapshot digested otherwise, a
  retyped column) holds the snapshot's values: its snapshot row digest may be brought up to
  date at any time (`pending_table`), no request is owed;
- the warehouse's memory limit stays as the URL sets it: a join larger than it spills; how
  the pending table is made within it is `snapshot/pending_table.py`'s.
An attribute's digest is the first 16 hex digits of the MD5 of the value's text in the
warehouse: stable across versions of the warehouse's engine, so the attributes sent never
depend on its hash functions (a row digest that changed with them costs time only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import DDLCompiler
from sqlalchemy.sql.ddl import DDLElement

from engage_sync.read.extract import source_of
from engage_sync.read.key_digest import key_md5
from engage_sync.read.source_spec import SourceSpec
from engage_sync.snapshot.layout import CHANGE, CHANGED, LEFT, NEW, ROW, Layout
from engage_sync.snapshot.row_digest import column_type, row_digest

HERE = "engage_here"


class CreateTableAs(DDLElement):
    """CREATE TABLE <name> AS <select>: the select's types become the table's."""

    inherit_cache = False

    def __init__(self, name: str, select: sa.Select[Any], if_not_exists: bool = False) -> None:
        self.name, self.select, self.if_not_exists = name, select, if_not_exists


@compiles(CreateTableAs)
def _create_as(element: CreateTableAs, compiler: DDLCompiler, **kw: Any) -> str:
    body = compiler.sql_compiler.process(element.select, literal_binds=True)
    exists = "IF NOT EXISTS " if element.if_not_exists else ""
    return f"CREATE TABLE {exists}{element.name} AS {body}"


def digest(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """A value's digest (NULL for NULL), computed by the warehouse."""
    return sa.func.substr(key_md5(column), 1, 16)


def ensure_snapshot(conn: Connection, layout: Layout, spec: SourceSpec,
                    resolved: dict[str, str]) -> None:
    """Create the schema and the snapshot table if missing (the identifier columns typed as
    the model's), and a digest column for each attribute it lacks."""
    prep = conn.dialect.identifier_preparer
    if layout.schema:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {prep.quote_schema(layout.schema)}")
    empty = empty_snapshot(layout, spec, resolved)
    conn.execute(CreateTableAs(layout.quoted(conn.dialect, layout.snapshot_name), empty,
                               if_not_exists=True))
    have = {c["name"].lower() for c in sa.inspect(conn).get_columns(
        layout.snapshot_name, schema=layout.schema)}
    wanted = [(ROW, column_type(conn.dialect.name)),
              *((a.digest, "VARCHAR") for a in layout.attributes)]
    for name, sql_type in wanted:
        if name not in have:
            conn.exec_driver_sql(
                f"ALTER TABLE {layout.quoted(conn.dialect, layout.snapshot_name)} "
                f"ADD COLUMN {prep.quote(name)} {sql_type}")


def empty_snapshot(layout: Layout, spec: SourceSpec, resolved: dict[str, str]
                   ) -> sa.Select[Any]:
    """No row, in the snapshot's shape: its identifiers typed as the model's."""
    return sa.select(*(sa.column(resolved[c]).label(c) for c in layout.ids),
                     row_digest(sa.literal("", sa.String)).label(ROW),
                     *(sa.cast(sa.null(), sa.String).label(a.digest) for a in layout.attributes)
                     ).select_from(source_of(spec)).where(sa.false())


def pending_select(layout: Layout, spec: SourceSpec, resolved: dict[str, str],
                   on_leave: str, snapshot: sa.FromClause | None = None) -> sa.Select[Any]:
    """The users with something to send, their attribute digests and what to send of each,
    in one select (see the module's invariants; what a dry run counts); `snapshot` stands
    for the snapshot table (a dry run's empty one, before any run)."""
    held = snapshot if snapshot is not None else layout.snapshot()
    differ = differ_select(layout, spec, resolved, held).subquery("engage_differ")
    compared = sends_select(layout, with_values(layout, spec, resolved, differ),
                            held.alias("engage_old"), on_leave).subquery("engage_compared")
    return sa.select(*compared.c).where(wanted(layout, compared.c, on_leave))


def _model(spec: SourceSpec, resolved: dict[str, str], names: Sequence[str]
           ) -> tuple[sa.FromClause, list[sa.ColumnElement[Any]]]:
    """The model read anew, and its columns `names` (as the mapping names them)."""
    return source_of(spec), [sa.column(resolved[n]) for n in names]


def differ_select(layout: Layout, spec: SourceSpec, resolved: dict[str, str],
            held: sa.FromClause) -> sa.Select[Any]:
    """The users whose row digest differs from the snapshot's, by identifier and row digest
    only: the join that reads every user carries two columns a side (values carried through
    it for every user cost most of a comparison, and spill)."""
    src, cols = _model(spec, resolved, [*layout.ids, *(a.column for a in layout.attributes)])
    ids, values = cols[:len(layout.ids)], cols[len(layout.ids):]
    cur = sa.select(*(i.label(c) for i, c in zip(ids, layout.ids, strict=True)),
                    row_digest(_kept_as(layout), *values).label(ROW),
                    sa.literal(1).label(HERE)).select_from(src).where(
        *(i.is_not(None) for i in ids)).subquery("engage_cur")
    keys = sa.select(*(held.c[c] for c in layout.ids), held.c[ROW]).subquery("engage_keys")
    return sa.select(
        sa.case((keys.c[layout.ids[0]].is_(None), sa.literal(NEW)),
                (cur.c[HERE].is_(None), sa.literal(LEFT)),
                else_=sa.literal(CHANGED)).label(CHANGE),
        *(sa.func.coalesce(cur.c[c], keys.c[c]).label(c) for c in layout.ids), cur.c[ROW],
    ).select_from(cur.join(keys, sa.and_(*(cur.c[c] == keys.c[c] for c in layout.ids)),
                           full=True)
                  ).where(cur.c[ROW].is_distinct_from(keys.c[ROW]))


def with_values(layout: Layout, spec: SourceSpec, resolved: dict[str, str],
                differ: sa.FromClause, part: Part = None) -> sa.Subquery:
    """The differing users with their values: the model read again, joined on identifier and
    row digest (a user the model returns twice keeps each row's own values), and the rows
    without an identifier, new each time (the run reports them). `part` (k, n): only the
    users whose first identifier hashes to k of n on both sides, the rows without an
    identifier with part 0."""
    src, cols = _model(spec, resolved, [*layout.ids, *(a.column for a in layout.attributes)])
    ids, values = cols[:len(layout.ids)], cols[len(layout.ids):]
    row = row_digest(_kept_as(layout), *values).label(ROW)
    now = sa.select(*(i.label(c) for i, c in zip(ids, layout.ids, strict=True)),
                    *(v.label(a.column) for v, a in zip(values, layout.attributes, strict=True)),
                    row).select_from(src).subquery("engage_now")
    ours = in_slice(now, layout.ids[0], part, "engage_part")
    mine = in_slice(differ, layout.ids[0], part, "engage_dpart")
    same = [*(mine.c[c] == ours.c[c] for c in layout.ids), mine.c[ROW] == ours.c[ROW]]
    known = sa.select(mine.c[CHANGE], *(mine.c[c] for c in layout.ids),
                      *(ours.c[a.column] for a in layout.attributes), mine.c[ROW]
                      ).select_from(mine.join(ours, sa.and_(*same), isouter=True))
    if part is not None and part[0] != 0:
        return known.subquery("engage_valued")
    unkeyed = sa.select(sa.literal(NEW).label(CHANGE), *(now.c[c] for c in layout.ids),
                        *(now.c[a.column] for a in layout.attributes), now.c[ROW]
                        ).where(sa.or_(*(now.c[c].is_(None) for c in layout.ids)))
    return sa.union_all(known, unkeyed).subquery("engage_valued")


SLICE_USERS = 1_000_000
"""Users a join or a grouping of users runs over at once on DuckDB, at most (`parts`)."""

Part = tuple[int, int] | None
"""(k, n): the users whose first identifier hashes to k of n; None: every user."""


def parts(conn: Connection, users: int) -> list[Part]:
    """The slices a statement over `users` users runs in: on DuckDB, n slices of at most
    `SLICE_USERS` users each; elsewhere (or when they fit one) one, unsliced."""
    n = math.ceil(users / SLICE_USERS) if conn.dialect.name == "duckdb" else 1
    return [(k, n) for k in range(n)] if n > 1 else [None]


def in_part(column: sa.ColumnElement[Any], part: tuple[int, int]) -> sa.ColumnElement[bool]:
    """The rows whose `column` hashes to part k of n (DuckDB's `hash`)."""
    k, n = part
    return sa.func.hash(column) % n == k


def in_slice(rows: sa.FromClause, column: str, part: Part, name: str) -> sa.FromClause:
    """`rows` whose `column` hashes to `part`, as a subquery `name`; `rows` itself when `part`
    is None (every user)."""
    if part is None:
        return rows
    return sa.select(rows).where(in_part(rows.c[column], part)).subquery(name)


def _kept_as(layout: Layout) -> sa.ColumnElement[Any]:
    """Where the snapshot keeps each attribute, as the row digest's first field: a file that
    maps a column to another attribute (or an audience to another attribute) changes every
    row's digest, so every user is compared again and sent to the new place."""
    return sa.literal(" ".join(a.digest for a in layout.attributes), sa.String)


def sends_select(layout: Layout, rows: sa.FromClause, old: sa.FromClause, on_leave: str
           ) -> sa.Select[Any]:
    """The differing users with their attribute digests and what to send of each (the
    snapshot's digests read for them only)."""
    joined = rows.join(old, sa.and_(*(rows.c[c] == old.c[c] for c in layout.ids)),
                       isouter=True)
    change = rows.c[CHANGE]
    sends = []
    for a in layout.attributes:
        now = digest(rows.c[a.column])
        gone = old.c[a.digest].is_not(None) if on_leave == "clear" else sa.false()
        sends.append(sa.case((change == NEW, rows.c[a.column].is_not(None)),
                             (change == LEFT, gone),
                             else_=now.is_distinct_from(old.c[a.digest])).label(a.send))
    return sa.select(change, *(rows.c[c] for c in layout.ids),
                     *(rows.c[a.column] for a in layout.attributes), rows.c[ROW],
                     *(digest(rows.c[a.column]).label(a.digest) for a in layout.attributes),
                     *sends).select_from(joined)


def wanted(layout: Layout, cols: Any, on_leave: str) -> sa.ColumnElement[bool]:
    """A compared user with something to do: an attribute to send, or (`delete`) leaving."""
    terms: list[sa.ColumnElement[Any]] = [cols[a.send] for a in layout.attributes]
    if on_leave == "delete":
        terms.append(cols[CHANGE] == LEFT)
    return sa.or_(*terms)


def order(layout: Layout, cols: Any) -> list[sa.ColumnElement[Any]]:
    """The pending users' order: leavers last, then by identifier."""
    return [sa.case((cols[CHANGE] == LEFT, 1), else_=0), *(cols[c] for c in layout.ids)]


@dataclass(frozen=True)
class PendingCounts:
    """The run's pending users by change, the users in the snapshot, and identifiers the
    model returns more than once (among the pending)."""

    new: int = 0
    changed: int = 0
    left: int = 0
    held: int = 0
    repeated: int = 0


def pending_counts(conn: Connection, layout: Layout) -> PendingCounts:
    p, s = layout.pending(), layout.snapshot()
    by = {str(k): int(n) for k, n in conn.execute(
        sa.select(p.c[CHANGE], sa.func.count()).group_by(p.c[CHANGE]))}
    held = int(conn.execute(sa.select(sa.func.count()).select_from(s)).scalar_one())
    ids = [p.c[c] for c in layout.ids]
    repeated = 0
    for part in parts(conn, sum(by.values())):  # a first run's users do not fit DuckDB's memory
        twice = sa.select(*ids).where(*(i.is_not(None) for i in ids), *(
            [in_part(ids[0], part)] if part else [])).group_by(*ids).having(
            sa.func.count() > 1).subquery("engage_twice")
        repeated += int(conn.execute(sa.select(sa.func.count()).select_from(twice)).scalar_one())
    return PendingCounts(by.get(NEW, 0), by.get(CHANGED, 0), by.get(LEFT, 0), held, repeated)


def pending_points(conn: Connection, layout: Layout) -> int:
    """The attributes the pending users would send (one point each)."""
    p = layout.pending()
    terms = [sa.func.sum(sa.case((p.c[a.send], 1), else_=0)) for a in layout.attributes]
    total = sa.select(*terms)
    return sum(int(v or 0) for v in conn.execute(total).one())
