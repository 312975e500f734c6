"""Leavers counted everywhere (DuckDB and PostgreSQL): a `changes: snapshot` run that clears
users who left writes `rows_left` in the write-back's run row and one `left` outcome per
leaver, joined to the model by its identifier; the lineage facet carries `rowsLeft`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import sqlalchemy as sa
from openlineage.client.serde import Serde

from engage_sync.adapters.lineage_events import stats_facet
from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, Warehouse, write_integration

ROOT = Path(__file__).resolve().parents[3]
USERS, GONE = 300, 30


@pytest.fixture
def schema(warehouse: Warehouse) -> Iterator[str]:
    """A schema of the warehouse the write-back creates, dropped after the test."""
    name = f"wbl_{uuid.uuid4().hex[:10]}"
    yield name
    warehouse.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _select(wh: Warehouse, sql: str, **params: Any) -> list[Any]:
    with wh.engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params).all())


def test_leavers_are_in_the_run_row_and_one_left_outcome_each(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path, schema: str
) -> None:
    warehouse.create("model", [("user_id", sa.String()), ("plan", sa.String()),
                               ("score", sa.Integer())])
    warehouse.insert("model", [{"user_id": f"u{i:04d}", "plan": "free", "score": i}
                               for i in range(USERS)])
    path = write_integration(tmp_path, "traits", {
        "kind": "attributes", "changes": "snapshot", "on_leave": "clear",
        "warehouse": {"url": warehouse.url}, "source": {"table": "model"},
        "mapping": {"identifier": {"external_id": "user_id"},
                    "attributes": {"plan": "plan", "score": "score"}},
        "writeback": {"schema": schema},
        "service": {"base_url": service.base_url, "retry_deadline_seconds": 60}})
    runs, outcomes = f"{schema}.engage_sync_runs", f"{schema}.engage_sync_row_outcomes"
    assert sync_file(path, store=state).writeback_error is None
    warehouse.execute(f"ALTER TABLE {runs} DROP COLUMN rows_left")  # as an older version made

    warehouse.execute(f"DELETE FROM model WHERE score < {GONE}")
    result = sync_file(path, store=state)
    record = result.record
    assert record is not None and result.writeback_error is None
    assert record["rows_left"] == GONE
    assert _select(warehouse, f"SELECT rows_left FROM {runs} WHERE run_id = :r",
                   r=record["run_id"]) == [(GONE,)]
    left = _select(warehouse, f"SELECT user_id, outcome, reason FROM {outcomes} "
                              "WHERE run_id = :r ORDER BY user_id", r=record["run_id"])
    assert [r[0] for r in left] == [f"u{i:04d}" for i in range(GONE)]
    assert {r[1] for r in left} == {"left"} and "removed" in left[0][2]
    assert state.run_errors(record["run_id"]) == []  # an outcome, not an error


def test_the_lineage_facet_counts_leavers_and_its_schema_takes_them() -> None:
    facet = stats_facet({"run_id": "r", "job_status": "success", "mode": "incremental",
                         "rows_synced": 9, "rows_left": 7})
    data = json.loads(Serde.to_json(facet))
    schema = json.loads(
        (ROOT / "src" / "engage_sync" / "adapters" / "EngageSyncRunFacet.json").read_text())
    jsonschema.validate(data, schema)
    assert data["rowsLeft"] == 7
