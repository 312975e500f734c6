"""On DuckDB the pending table is written sorted and numbered by its row ids (its window over a
whole result of 10M users does not fit the default memory limit); the numbers must be those the
window gives on every other warehouse: 1 to n, leavers last, users in identifier order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from engage_sync import kinds
from engage_sync.config.files import parse_integration
from engage_sync.read.extract import resolve_columns
from engage_sync.read.plan import source_spec
from engage_sync.snapshot import compare
from engage_sync.snapshot.layout import CHANGE, LEFT, SEQ, layout_of

MODEL: dict[str, Any] = {
    "kind": "attributes", "changes": "snapshot", "on_leave": "clear", "source": {"table": "m"},
    "mapping": {"identifier": {"external_id": "ID"},
                "attributes": {"PLAN": "plan", "CITY": "city"}},
}


def test_duckdbs_sorted_numbering_is_the_windows(tmp_path: Path) -> None:
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'w.duckdb'}")
    integration = parse_integration(
        {**MODEL, "warehouse": {"url": str(engine.url)}}, file="people.yaml")
    layout = layout_of(integration)
    spec = source_spec(integration, kinds.kind_of(integration))
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE m AS SELECT 'u' || lpad(CAST((i * 7919) % 1000 AS VARCHAR), 4, '0') "
            "AS ID, 'p' || (i % 3) AS PLAN, CASE WHEN i % 5 = 0 THEN NULL ELSE 'c' || i END "
            "AS CITY FROM range(1000) t(i)")
        resolved = resolve_columns(conn, spec)
        compare.ensure_snapshot(conn, layout, spec, resolved)
        snapshot = layout.quoted(conn.dialect, layout.snapshot_name)
        # users u0000-u0399 held with other digests (changed), x000-x099 no longer returned
        conn.exec_driver_sql(
            f"INSERT INTO {snapshot} SELECT ID, 0, 'a', 'b' FROM m WHERE ID < 'u0400' UNION ALL "
            "SELECT 'x' || lpad(CAST(i AS VARCHAR), 3, '0'), 0, 'a', NULL FROM range(100) t(i)")
        compare.make_pending(conn, layout, spec, resolved, "clear")
        pending = layout.pending()
        written = conn.execute(sa.select(pending.c[SEQ], pending.c[CHANGE], pending.c.ID)
                               .order_by(pending.c[SEQ])).all()
        window = compare.pending_select(layout, spec, resolved, "clear").subquery("w")
        numbered = conn.execute(sa.select(window.c[SEQ], window.c[CHANGE], window.c.ID)
                                .order_by(window.c[SEQ])).all()
    assert written == numbered
    assert [s for s, _, _ in written] == list(range(1, 1101))  # 1,000 users, 100 leavers
    assert {c for _, c, _ in written[-100:]} == {LEFT}
    assert [i for _, _, i in written[:1000]] == sorted(i for _, _, i in written[:1000])
