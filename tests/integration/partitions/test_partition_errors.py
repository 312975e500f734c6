"""A partitioned run's row errors read as one run's: `engage-sync errors INTEGRATION` lists every
row error of every partition with its partition, and names no partition a user must know.

A run in 4 partitions (threads, `--no-prefect`) is killed while the sandbox holds one request,
then resumed by a later run: the requests its partitions had in flight are sent again, and
every row counted in `rows_possibly_duplicated` is listed as `duplicate` under the
integration, with its partition; asking for one partition (`events#k/4`) lists that one's.
On SQLite and PostgreSQL, errors a partition's run records (or an earlier version kept under
the partition's name) are listed under the integration and in the run's errors artifact.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import open_state
from engage_sync.state.schema import row_errors
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    event_rows,
    kill_during_request,
    resume_cli,
    table_integration,
)
from tests.integration.errors_listing import listed

ROWS = 6000
_LABEL = re.compile(r"^\d+/4$")


def test_rows_a_killed_partitioned_run_resent_are_listed_under_the_integration(
        service: Service, tmp_path: Path, sandbox_key: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    path = table_integration(wh, service, tmp_path, "events",
                             event_rows(ROWS, users=400, step=timedelta(seconds=1)),
                             partitions=4, in_doubt="resend", service={"max_in_flight": 2})
    wh.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, sandbox_key, state_url, nth=40)
    record = resume_cli(path, state_url, sandbox_key)

    assert record["job_status"] == "success" and record["rows_synced"] == ROWS
    doubled = record["rows_possibly_duplicated"]
    assert doubled >= 75  # at least the request the sandbox held at the kill
    arrived = Counter(service.event_ids())
    assert len(arrived) == ROWS

    rows = listed(state_url, "events", capsys)
    duplicates = [r for r in rows if r["kind"] == "duplicate"]
    assert len(duplicates) == doubled  # every row counted, listed once
    assert all(_LABEL.match(r["partition"]) for r in duplicates), duplicates[:3]
    named = {r["row_key"] for r in duplicates}
    assert {e for e, n in arrived.items() if n > 1} <= named  # every event that came twice

    by_partition = Counter(r["partition"] for r in duplicates)
    for label, count in by_partition.items():  # a partition named: its rows only
        alone = listed(state_url, f"events#{label}", capsys)
        assert len(alone) == count and {r["partition"] for r in alone} == {label}

    store = open_state(state_url)
    parent = store.runs_newest_first("events", 0, 1)[0]
    artifact = [e for e in store.run_errors(parent["run_id"], limit=100_000)
                if e["kind"] == "duplicate"]  # what the flow's errors artifact shows
    assert len(artifact) == doubled and all(_LABEL.match(e["partition"]) for e in artifact)
    assert {e["integration"] for e in store.errors("events", limit=100_000)} == {"events"}
    store.engine.dispose()


def test_a_partitions_errors_are_kept_and_listed_under_the_integration(
        state_both: StateStore, capsys: pytest.CaptureFixture[str]) -> None:
    """Recorded by a partition's run (`events#0/2`), an error is kept under `events`; one kept
    under a partition's name by an earlier version is listed too; naming a partition lists its
    errors alone; an integration whose name merely starts the same is not listed."""
    state = state_both
    parent = state.open_run("events", "incremental", None, None)
    first = state.open_run("events#0/2", "incremental", None, None, scope=parent)
    second = state.open_run("events#1/2", "incremental", None, None, scope=parent)
    other = state.open_run("events_k", "incremental", None, None)
    state.record_errors(first, "events#0/2", "duplicate", [("req1:0", "e1", "resent")])
    state.record_errors(other, "events_k", "failed", [("req1:0", "k1", "refused")])
    with state.engine.begin() as conn:  # as an earlier version kept it
        conn.execute(row_errors.insert().values(
            run_id=second, kind="in_doubt", position="req2:0", row_key="e2",
            integration="events#1/2", reason="maybe", recorded_at=datetime.now(UTC)))

    shown = {(e["row_key"], e["kind"], e["partition"]) for e in state.errors("events")}
    assert shown == {("e1", "duplicate", "0/2"), ("e2", "in_doubt", "1/2")}
    assert [e["integration"] for e in state.errors("events", partition="0/2")] == ["events"]
    assert {(e["row_key"], e["partition"]) for e in state.run_errors(parent)} == {
        ("e1", "0/2"), ("e2", "1/2")}  # what a flow's errors artifact shows
    assert state.run_errors(other) == [{"kind": "failed", "row_key": "k1", "reason": "refused"}]

    url = state.engine.url.render_as_string(hide_password=False)
    assert [(r["row_key"], r["partition"]) for r in listed(url, "events#1/2", capsys)] == [
        ("e2", "1/2")]  # a partition's name is not cut to the file stem `2`
    assert len(listed(url, "events", capsys)) == 2
