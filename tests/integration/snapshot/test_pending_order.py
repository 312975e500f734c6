"""On DuckDB the pending table is numbered as its scan reads the compared users (its window over
a whole result of 10M users, and its sort of their values, do not fit the default memory limit);
it must hold what the window gives on every other warehouse, numbered 1 to n, leavers last."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync import kinds
from engage_sync.config.files import parse_integration
from engage_sync.read.extract import resolve_columns
from engage_sync.read.plan import source_spec
from engage_sync.read.source_spec import SourceSpec
from engage_sync.snapshot import compare, pending_table
from engage_sync.snapshot.layout import LEFT, SEQ, Layout, layout_of

MODEL: dict[str, Any] = {
    "kind": "attributes", "changes": "snapshot", "on_leave": "clear", "source": {"table": "m"},
    "mapping": {"identifier": {"external_id": "ID"},
                "attributes": {"PLAN": "plan", "CITY": "city"}},
}


def _people(tmp_path: Path) -> tuple[sa.Engine, Layout, SourceSpec]:
    """A DuckDB file, and the layout and source spec of MODEL's integration on it."""
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'w.duckdb'}")
    integration = parse_integration(
        {**MODEL, "warehouse": {"url": str(engine.url)}}, file="people.yaml")
    return engine, layout_of(integration), source_spec(integration, kinds.kind_of(integration))


@pytest.mark.parametrize("slice_users", [compare.SLICE_USERS, 128], ids=["whole", "sliced"])
def test_duckdbs_numbering_as_scanned_holds_the_windows_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_users: int
) -> None:
    """Also with the comparison in slices (the users whose row digest differs read again with
    their values, then compared with the snapshot's digests, each in 9 slices of the 1,100
    rows: both sides sliced the same way, so a changed user finds its values and digests and
    a leaver its row; the row without an identifier comes through once)."""
    monkeypatch.setattr(compare, "SLICE_USERS", slice_users)
    engine, layout, spec = _people(tmp_path)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE m AS SELECT 'u' || lpad(CAST((i * 7919) % 1000 AS VARCHAR), 4, '0') "
            "AS ID, 'p' || (i % 3) AS PLAN, CASE WHEN i % 5 = 0 THEN NULL ELSE 'c' || i END "
            "AS CITY FROM range(1000) t(i) UNION ALL SELECT NULL, 'p9', 'c9'")  # no identifier
        resolved = resolve_columns(conn, spec)
        compare.ensure_snapshot(conn, layout, spec, resolved)
        snapshot = layout.quoted(conn.dialect, layout.snapshot_name)
        # users u0000-u0399 held with other digests (changed), x000-x099 no longer returned
        conn.exec_driver_sql(
            f"INSERT INTO {snapshot} SELECT ID, 0, 'a', 'b' FROM m WHERE ID < 'u0400' UNION ALL "
            "SELECT 'x' || lpad(CAST(i AS VARCHAR), 3, '0'), 0, 'a', NULL FROM range(100) t(i)")
        pending_table.make_pending(conn, layout, spec, resolved, "clear")
        pending = layout.pending()
        written = conn.execute(sa.select(*pending.c).order_by(pending.c[SEQ])).all()
        counted = compare.pending_select(layout, spec, resolved, "clear").subquery("w")
        seq = sa.func.row_number().over(order_by=compare.order(layout, counted.c))
        window = sa.select(seq.label(SEQ), *counted.c).subquery("n")
        numbered = conn.execute(sa.select(*window.c).order_by(window.c[SEQ])).all()
    assert sorted(map(repr, (r[1:] for r in written))) == sorted(  # what to send too
        map(repr, (r[1:] for r in numbered)))
    assert [r[0] for r in written] == list(range(1, 1102))  # 1,001 rows, 100 leavers
    assert sum(r[2] is None for r in written) == 1
    assert {r[1] for r in written[-100:]} == {LEFT}


@pytest.mark.parametrize("slice_users", [compare.SLICE_USERS, 16], ids=["whole", "sliced"])
def test_users_the_model_returns_twice_are_counted_in_slices_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_users: int
) -> None:
    monkeypatch.setattr(compare, "SLICE_USERS", slice_users)
    engine, layout, spec = _people(tmp_path)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE m AS SELECT 'u' || i AS ID, 'p' AS PLAN, 'c' AS CITY FROM range(200) "
            "t(i) UNION ALL SELECT 'u' || i, 'q', 'c' FROM range(2) t(i)")
        resolved = resolve_columns(conn, spec)
        compare.ensure_snapshot(conn, layout, spec, resolved)
        pending_table.make_pending(conn, layout, spec, resolved, "clear")
        counts = compare.pending_counts(conn, layout)
    assert (counts.new, counts.repeated) == (202, 2)
