"""Edges of crash-safety: resumes whose journal is out of source order, a 401
mid-run, a warehouse failure mid-run, and a full resync next to the incremental cursor."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import engage_sync.read.reader as reading
from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.deliver import key_check
from engage_sync.errors import SourceError, SyncError
from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    event_rows,
    table_integration,
)

STEP = timedelta(milliseconds=500)


def _events(wh: Warehouse, svc: Service, tmp_path: Path, n: int = 600, **extra: Any) -> Path:
    return table_integration(wh, svc, tmp_path, "events", event_rows(n, users=60, step=STEP),
                             **extra)


def _end(k: int) -> tuple[Any, ...]:
    """End cursor of the k-th range of 75 rows (1-based)."""
    i = k * 75 - 1
    return (T0 + i * STEP, f"e{i:06d}")


def _ranges_of(ids: Counter[str]) -> set[int]:
    return {int(e[1:]) // 75 + 1 for e in ids}


def test_a_resume_skips_settled_ranges_whatever_their_journal_order(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _events(warehouse, service, tmp_path, in_doubt="resend",
                   service={"max_in_flight": 4})
    # the journal two crashes leave: the first attempt settled ranges 1, 3, 5 and left 2, 4
    # pending; the resumed one re-sent range 2 as request 6 (pending at its crash) and range 4
    # as request 7
    run = state.open_run("events", "incremental", None, datetime(2026, 1, 2))
    layout = {1: (1, "acked"), 2: (2, "pending"), 3: (3, "acked"), 4: (4, "pending"),
              5: (5, "acked"), 6: (2, "pending"), 7: (4, "acked")}
    for req, (rng, how) in layout.items():
        start = None if rng == 1 else _end(rng - 1)
        state.journal_pending(run, [JournalEntry(req, start, _end(rng), 75)])
        if how == "acked":
            state.settle(run, "events", [Settlement(req, "acked", 75)])
    state.advance(run, "events", _end(1))

    record = sync_file(path, store=state).record
    assert record is not None
    assert _ranges_of(Counter(service.event_ids())) == {2, 6, 7, 8}
    assert record["rows_read"] == record["rows_synced"] == 600  # 4 ranges before, 4 now


def test_a_401_mid_run_leaves_the_refused_rows_for_the_next_run(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, sandbox_key: str,
) -> None:
    path = _events(warehouse, service, tmp_path, n=300, service={"max_in_flight": 1})
    monkeypatch.setenv("ENGAGE_API_KEY", "a-rotated-key-0000")
    # rotated after the run's key check passed: refused by the run's first request
    monkeypatch.setattr(key_check, "check_key", lambda *args: None)
    with pytest.raises(SyncError):
        sync_file(path, store=state)
    assert service.event_ids() == []
    monkeypatch.setenv("ENGAGE_API_KEY", sandbox_key)
    record = sync_file(path, store=state).record
    assert record is not None and record["rows_synced"] == 300
    ids = Counter(service.event_ids())
    assert len(ids) == 300 and max(ids.values()) == 1


def test_a_warehouse_failure_mid_run_settles_what_was_in_flight(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _events(warehouse, service, tmp_path, n=300, in_doubt="skip",
                   extract_batch_rows=100, service={"max_in_flight": 2})
    real = reading.stream_batches

    def failing(*args: Any, **kwargs: Any) -> Any:
        for n, batch in enumerate(real(*args, **kwargs)):
            if n == 2:
                raise SourceError("integration events: reading table events_sync failed")
            yield batch

    service.faults([{"path": "/users/track", "action": "delay", "nth": [2],
                     "delay_seconds": 1}])
    monkeypatch.setattr(reading, "stream_batches", failing)
    with pytest.raises(SourceError):
        sync_file(path, store=state)
    monkeypatch.setattr(reading, "stream_batches", real)
    service.faults([])
    sent_before = len(service.event_ids())
    assert sent_before == 150  # two requests: the delayed one was waited for, not abandoned

    record = sync_file(path, store=state).record
    assert record is not None and record["rows_synced"] == 300 - sent_before
    ids = Counter(service.event_ids())
    assert len(ids) == 300 and max(ids.values()) == 1  # at most once held across the error


def test_a_full_resync_never_moves_the_cursor_backwards(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _events(warehouse, service, tmp_path, n=300, extract_batch_rows=100,
                   service={"max_in_flight": 1})
    sync_file(path, store=state)
    top = state.cursor("events")
    real = reading.stream_batches

    def stopping(*args: Any, **kwargs: Any) -> Any:
        for n, batch in enumerate(real(*args, **kwargs)):
            if n == 2:
                raise KeyboardInterrupt  # the full resync is stopped after two requests
            yield batch

    monkeypatch.setattr(reading, "stream_batches", stopping)
    with pytest.raises(KeyboardInterrupt):
        sync_file(path, store=state, options=RunOptions(mode="full_resync"))
    monkeypatch.setattr(reading, "stream_batches", real)
    assert state.cursor("events") == top
    record = sync_file(path, store=state).record
    assert record is not None and record["rows_read"] == 0


def test_text_keys_are_read_in_the_order_python_compares_them(
    postgres_url: str, tmp_path: Path
) -> None:
    """A key column collated by language rules (ICU) sorts 'a, B, c' in SQL but 'B, a, c' in
    Python, where resumes, lookback and backfills compare cursors: the extract orders text by
    bytes so both agree, and continues after a cursor in that same order."""
    import sqlalchemy as sa

    from engage_sync.read.extract import SourceSpec, Window, stream_batches

    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS icu_keys")
        conn.exec_driver_sql('CREATE TABLE icu_keys (event_id VARCHAR COLLATE "und-x-icu", '
                             "updated_at TIMESTAMP)")
        for key in ["a", "B", "c", "D", "é", "E"]:
            conn.exec_driver_sql("INSERT INTO icu_keys VALUES (%s, %s)", (key, T0))
    spec = SourceSpec("icu", "icu_keys", None, None, "UPDATED_AT", ("EVENT_ID",),
                      ("UPDATED_AT", "EVENT_ID"))

    def keys(window: Window) -> list[str]:
        return [r["EVENT_ID"] for b in stream_batches(engine, spec, window, 100)
                for r in b.to_pylist()]

    everything = keys(Window(start=None, signpost=None))
    assert everything == sorted(everything) == ["B", "D", "E", "a", "c", "é"]
    assert keys(Window(start=(T0, "D"), signpost=None)) == ["E", "a", "c", "é"]
    engine.dispose()


def test_a_run_still_in_progress_on_this_host_is_not_taken_over(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    import socket
    import subprocess
    import sys

    from engage_sync.errors import RunRefused
    from engage_sync.state.schema import runs

    path = _events(warehouse, service, tmp_path, n=100)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = state.open_run("events", "incremental", None, datetime(2026, 1, 2))
        with state.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run).values(
                owner=f"{socket.gethostname()}:{other.pid}"))
        with pytest.raises(RunRefused, match="still in progress"):
            sync_file(path, store=state)
        assert service.requests() == []
    finally:
        other.kill()
        other.wait()
    record = sync_file(path, store=state).record  # its owner is gone: resumed
    assert record is not None and record["rows_synced"] == 100


def test_state_on_postgresql_for_teams(
    warehouse: Warehouse, service: Service, tmp_path: Path, postgres_url: str,
) -> None:
    """The state database may be PostgreSQL: cursors, journal, row errors (upserts), lookback
    acks, status pages and a resume all work on it."""
    import sqlalchemy as sa

    from engage_sync.adapters.wiring import open_state
    from engage_sync.status.record import page

    schema = f"state_{warehouse.name}"
    admin = sa.create_engine(postgres_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    state = open_state(f"{postgres_url}?options=-csearch_path%3D{schema}")
    path = _events(warehouse, service, tmp_path, n=300, lookback="1h",
                   service={"max_in_flight": 2})
    warehouse.insert("events_sync", [{"event_id": "bad", "updated_at": T0,
                                      "external_id": None, "payload": "{}"}])
    first = sync_file(path, store=state).record
    assert first is not None
    assert (first["rows_read"], first["rows_synced"], first["rows_rejected"]) == (301, 300, 1)
    second = sync_file(path, store=state).record  # lookback re-reads, acks filter everything
    assert second is not None and second["rows_read"] == 0
    assert [e["row_key"] for e in state.errors("events")] == ["bad"]
    assert len(page(state, "events", None).results) == 2
    assert Counter(service.event_ids()).most_common(1)[0][1] == 1
    state.engine.dispose()
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    admin.dispose()


def test_a_finished_run_keeps_one_journal_entry_per_stretch_of_acknowledged_requests(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = _events(warehouse, service, tmp_path, n=600, in_doubt="skip",
                   service={"max_in_flight": 1})
    service.faults([{"path": "/users/track", "action": "500", "nth": [4]}])
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["rows_synced"], record["rows_in_doubt"]) == (525, 75)
    run_id = str(record["run_id"])
    entries = state.journal_entries(run_id)
    # requests 1-3 acknowledged, 4 in doubt, 5-8 acknowledged: three entries, same coverage
    assert [(e.state, e.items) for e in entries] == [
        ("acked", 225), ("in_doubt", 75), ("acked", 300)]
    assert entries[0].start is None and entries[-1].end == _end(8)
    assert state.counts(run_id).synced == 525
