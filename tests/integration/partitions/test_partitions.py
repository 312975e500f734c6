"""Partitioned runs on real parts: DuckDB and PostgreSQL compute each row's partition, the
sandbox on loopback receives the requests, partitions run in threads (`--no-prefect`; the
Prefect and Dask runners are in tests/prefect/test_partitions_dask.py).

- the warehouse's partitions are disjoint, cover the window, and agree with `python_bucket`;
- a run in 4 partitions delivers every row and every event once, and leaves the cursor where
  one unpartitioned run leaves it;
- a run killed mid-flight leaves the cursor below every row not settled; the next start resumes
  only the partitions' unsettled rows, and events doubled by the kill are counted.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.config.files import load_integration
from engage_sync.config.run_options import RunOptions
from engage_sync.cursor.window import Window
from engage_sync.read import sent_rows
from engage_sync.read.extract import count_rows
from engage_sync.read.key_digest import python_bucket
from engage_sync.read.plan import prepare
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    _wait_for_request,
    _wait_until_answered,
    event_rows,
    run_cli,
    table_integration,
    user_rows,
)

STEP = timedelta(seconds=1)


def partition_counts(path: Path, count: int) -> list[int]:
    integration = load_integration(path)
    spec = prepare(integration, RunOptions()).spec
    engine = sa.create_engine(integration.warehouse.url)
    try:
        return [count_rows(engine, spec, Window(None, None, partition=(k, count)))
                for k in range(count)]
    finally:
        engine.dispose()


def test_the_warehouses_partitions_are_disjoint_cover_the_window_and_agree_with_python(
        warehouse: Warehouse, service: Service, tmp_path: Path) -> None:
    rows = user_rows(500, step=STEP)
    rows[7]["external_id"] = None  # a NULL key is still read (and rejected) by one partition
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    counts = partition_counts(path, 4)
    expected = Counter(python_bucket(r["external_id"], 4) for r in rows)
    assert counts == [expected[k] for k in range(4)]
    assert sum(counts) == 500


def run(path: Path, store: StateStore, partitions: int | None = None) -> dict[str, Any]:
    outcome = sync_file(path, options=RunOptions(partitions=partitions), store=store)
    assert outcome.record is not None
    return outcome.record


def test_a_run_in_4_partitions_delivers_every_row_once_and_moves_the_cursor_like_one_run(
        service: Service, tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    users = table_integration(wh, service, tmp_path, "attributes", user_rows(3000, step=STEP))
    events = table_integration(wh, service, tmp_path, "events",
                               event_rows(3000, users=400, step=STEP))
    wh.engine.dispose()
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    for path in (users, events):
        record = run(path, store, partitions=4)
        assert record["job_status"] == "success" and record["rows_synced"] == 3000
        children = store.partition_runs(record["run_id"])
        assert sorted(r["integration"] for r in children) == [
            f"{path.stem}#{k}/4" for k in range(4)]
        assert sum(r["rows_synced"] for r in children) == 3000
    ids = service.event_ids()
    assert len(ids) == 3000 and len(set(ids)) == 3000  # every event, once
    assert len([p for p in service.profiles()
                if str(p.get("external_id", "")).startswith("u")]) == 3000
    # the same rows, one unpartitioned run each, on a state of their own: the same cursors
    alone = open_state(f"sqlite:///{tmp_path / 'alone.db'}")
    for path in (users, events):
        run(path, alone, partitions=1)
        assert store.cursor(path.stem) == alone.cursor(path.stem)
        assert store.cursor(path.stem) is not None
    # nothing new: the next partitioned run reads nothing and leaves the cursor
    again = run(events, store, partitions=4)
    assert again["rows_synced"] == 0 and store.cursor("events") == alone.cursor("events")


def delivered_events(service: Service) -> Counter[str]:
    return Counter(service.event_ids())


def test_a_killed_partitioned_run_holds_the_cursor_below_its_unsettled_rows_and_resumes(
        service: Service, tmp_path: Path, sandbox_key: str) -> None:
    """SIGKILL the run (threads: every partition dies with it) while the sandbox holds one
    request; the cursor the coordinator moved stays below every row not delivered; the next
    start resumes the parent and its partitions and delivers the rest; events sent again after
    the kill are counted as possibly doubled."""
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    rows = event_rows(6000, users=400, step=STEP)
    path = table_integration(wh, service, tmp_path, "events", rows,
                             partitions=4, service={"max_in_flight": 2})
    wh.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    service.faults([{"path": "/users/track", "action": "delay", "nth": [40],
                     "delay_seconds": 5}])
    proc = run_cli(path, state_url, sandbox_key)
    _wait_for_request(service, 40, proc, "/users/track")
    time.sleep(3)  # the coordinator moves the cursor every 2 s
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _wait_until_answered(service, "/users/track")
    service.faults([])

    store = open_state(state_url)
    cursor = store.cursor("events")
    sent = delivered_events(service)
    assert len(sent) < 6000  # killed mid-run
    assert cursor is not None  # it moved while the partitions settled
    at_or_before = [r["event_id"] for r in rows
                    if (r["updated_at"], r["event_id"]) <= tuple(cursor)]
    assert at_or_before and all(sent[e] for e in at_or_before)  # never past an unsettled row

    resumed = run_cli(path, state_url, sandbox_key)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err.decode()
    record = json.loads(out)
    final = delivered_events(service)
    assert set(final) == {r["event_id"] for r in rows}  # nothing lost
    doubled = sum(n - 1 for n in final.values())
    assert doubled <= record["rows_possibly_duplicated"]  # every double counted
    parent = store.runs_newest_first("events", 0, 10)
    assert len(parent) == 1 and parent[0]["job_status"] == "success"
    children = store.partition_runs(parent[0]["run_id"])
    assert len(children) == 4  # resumed, not opened again
    alone = open_state(f"sqlite:///{tmp_path / 'alone.db'}")
    run(path, alone, partitions=1)
    assert store.cursor("events") == alone.cursor("events")
    store.engine.dispose()
    alone.engine.dispose()


@pytest.mark.parametrize("kind", ["deletes"])
def test_partitions_asked_of_a_kind_that_cannot_be_partitioned_is_a_config_error(
        kind: str, service: Service, tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    wh.create("deletes_sync", [("updated_at", sa.DateTime()), ("external_id", sa.String())])
    wh.insert("deletes_sync", [{"updated_at": T0, "external_id": "u1"}])
    wh.engine.dispose()
    from tests.integration.conftest import write_integration

    path = write_integration(tmp_path, "gone", {
        "kind": kind, "warehouse": {"url": url}, "source": {"table": "deletes_sync"},
        "service": {"base_url": service.base_url}})
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    from engage_sync.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        sync_file(path, options=RunOptions(partitions=4), store=store)
    assert err.value.key == "partitions" and "cannot be partitioned" in str(err.value)
    assert service.requests("/users/delete") == []


def test_a_backfill_of_events_skips_what_partitions_sent_and_runs_partitioned_itself(
        service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill of events drops the rows incremental runs sent: those sent by partitions
    too (their journals are the integration's); a late row below the cursor is sent once.
    Its partitions, side by side in this process, read what was sent once."""
    from datetime import datetime

    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    rows = event_rows(2000, users=300, step=STEP)
    events = table_integration(wh, service, tmp_path, "events", rows)
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    assert run(events, store, partitions=4)["rows_synced"] == 2000
    late = {**event_rows(1, at=T0 + 10 * STEP, users=300)[0], "event_id": "late"}
    late["payload"] = json.dumps({"name": "viewed", "properties": {"eid": "late"}})
    wh.insert("events_sync", [late])
    wh.engine.dispose()
    from engage_sync.config.run_options import run_options

    options = run_options("backfill", datetime(2025, 12, 31), datetime(2026, 1, 2), False,
                          False, partitions=4)
    reads: list[str] = []
    read_journal = StateStore.settled_entries

    def counted(state: StateStore, integration: str, modes: Any) -> Any:
        reads.append(integration)
        return read_journal(state, integration, modes)

    monkeypatch.setattr(StateStore, "settled_entries", counted)  # every store a run opens
    gc.disable()  # the copy must go with its runs, not wait for a cycle's collection
    try:
        outcome = sync_file(events, options=options, store=store)
        assert reads == ["events"]  # the 4 partitions in this process share one copy
        assert len(sent_rows._SHARED) == 0
    finally:
        gc.enable()
    assert outcome.record is not None and outcome.record["rows_synced"] == 1
    ids = Counter(service.event_ids())
    assert len(ids) == 2001 and max(ids.values()) == 1  # every event once, the late one too
    store.engine.dispose()


def test_a_finished_partition_run_again_sends_nothing(service: Service, tmp_path: Path) -> None:
    """A Dask worker that dies holding a finished partition's result makes the cluster run that
    partition again: it must not send its rows a second time (found with a real worker kill:
    3,465 events doubled before this rule)."""
    from engage_sync.adapters.resources import portable_url
    from engage_sync.adapters.wiring import run_partition
    from engage_sync.partitions.coordinator import PartitionJob

    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    events = table_integration(wh, service, tmp_path, "events",
                               event_rows(1000, users=100, step=STEP))
    wh.engine.dispose()
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    parent = run(events, store, partitions=4)["run_id"]
    sent = len(service.requests("/users/track"))
    for k in range(4):
        again = run_partition(PartitionJob(str(events.resolve()), k, 4, parent, "incremental",
                                           None, None, False, portable_url(store)))
        assert again["job_status"] == "success" and again["rows_synced"] > 0
    assert len(service.requests("/users/track")) == sent  # nothing sent again
    assert len(store.partition_runs(parent)) == 4  # no new partition run
    store.engine.dispose()


def test_a_partitioned_run_reports_its_partitions_counts_together(service: Service,
                                                                    tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    users = table_integration(wh, service, tmp_path, "attributes", user_rows(1200, step=STEP))
    wh.engine.dispose()
    seen: list[dict[str, int]] = []
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    sync_file(users, options=RunOptions(partitions=3), store=store, on_progress=seen.append)
    assert seen and all(s["window_rows"] == 1200 for s in seen)
    assert seen[-1]["synced"] == 1200 and seen[-1]["read"] == 1200
    store.engine.dispose()


def test_a_partitioned_run_is_not_kept_on_one_cpu_as_a_run_in_one_process_is(
        service: Service, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pin (cpu_affinity, ENGAGE_SYNC_PIN_CPU=auto) is for a run in one process; a
    partitioned run's partitions are meant to use the cores. Every pin attempt logs on
    engage_sync.cpu (pinned, or why not), so a partitioned run logs nothing there."""
    monkeypatch.setenv("ENGAGE_SYNC_PIN_CPU", "auto")
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    users = table_integration(wh, service, tmp_path, "attributes", user_rows(200, step=STEP))
    wh.engine.dispose()
    caplog.set_level("INFO", logger="engage_sync.cpu")
    for partitions, state in ((2, "parts.db"), (1, "one.db")):
        caplog.clear()
        record = run(users, open_state(f"sqlite:///{tmp_path / state}"), partitions)
        assert record["rows_synced"] == 200
        said = [r.getMessage() for r in caplog.records if r.name == "engage_sync.cpu"]
        if partitions > 1:
            assert said == []
        elif hasattr(os, "sched_setaffinity"):
            assert len(said) == 1 and "ENGAGE_SYNC_PIN_CPU" in said[0], said
