"""Sending failed rows again must never send anything twice or older values over newer ones
(the retry pass, superseded rows and the schema guard): a retry sends only the failed
request's own rows, keeps its range when resumed, passes an attribute row whose user has a
newer row, waits while another process runs the integration;
a backfill does not send what a retry will; a payload key of mixed types never flips the schema
guard; a value in doubt, then NULL, is removed."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.config.run_options import RunOptions, run_options
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    event_rows,
    kill_during_request,
    resume_cli,
    table_integration,
    write_integration,
)

ONCE = {"retry_deadline_seconds": 0.001, "max_in_flight": 1}


def _run(path: Path, state: StateStore, mode: str = "incremental", **kw: Any) -> dict[str, Any]:
    opts = run_options(mode, kw.get("start"), kw.get("end"), False, False)  # type: ignore[arg-type]
    rec = sync_file(path, store=state, options=opts).record
    assert rec is not None
    return rec


def _late_events_then_a_503(wh: Warehouse, service: Service) -> None:
    """Five late events at T0 (below what was sent); the next request answered 503."""
    wh.insert("events_sync", [
        {"event_id": f"e000140x{k}", "updated_at": T0, "external_id": "u00001",
         "payload": f'{{"name": "viewed", "properties": {{"eid": "late{k}"}}}}'}
        for k in range(5)])
    n = len(service.requests())
    service.faults([{"path": "/users/track", "action": "503", "nth": [n + 1]}])


def _each_event_once(service: Service) -> None:
    ids = Counter(service.event_ids())
    twice = sorted(k for k, v in ids.items() if v > 1)
    assert not twice, f"{len(twice)} events sent twice, e.g. {twice[:3]}"


def _changes_file(wh: Warehouse, svc: Service, folder: Path, attributes: dict[str, str],
                  **extra: Any) -> Path:
    return write_integration(folder, "changes", {
        "kind": "attributes", "warehouse": {"url": wh.url}, "source": {"table": "changes"},
        "mapping": {"identifier": {"external_id": "USER_ID"}, "attributes": attributes},
        "service": {"base_url": svc.base_url, **ONCE}, **extra})


def _create(wh: Warehouse, rows: list[dict[str, Any]]) -> None:
    wh.create("changes", [("updated_at", sa.DateTime()), ("user_id", sa.String()),
                          ("plan", sa.String()), ("sub", sa.String())])
    wh.insert("changes", rows)


def test_a_retry_never_sends_a_users_older_row_over_a_newer_one(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    rows = [{"updated_at": T0 + timedelta(seconds=i), "user_id": f"s{i:05d}", "plan": "free",
             "sub": None} for i in range(150)]
    rows.append({"updated_at": T0 + timedelta(hours=1), "user_id": "s00000", "plan": "pro",
                 "sub": None})
    _create(warehouse, rows)
    path = _changes_file(warehouse, service, tmp_path, {"PLAN": "plan"})
    service.faults([{"path": "/users/track", "action": "503", "nth": [1]}])
    first = _run(path, state)
    assert first["rows_failed_with_errors"] == 75
    assert service.profile("s00000")["attributes"]["plan"] == "pro"  # the later row landed
    service.faults([])
    _run(path, state)  # the retry pass re-reads request 1's range
    assert service.profile("s00000")["attributes"]["plan"] == "pro", \
        "the retry sent s00000's older, superseded row over its newer value"


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)  # a kill: one is enough
def test_a_resumed_retry_run_keeps_to_its_range(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
) -> None:
    """300 events sharing one UPDATED_AT; request 2 fails; the retry run is killed mid-request;
    the resumed retry run has lost `until` and re-sends events 150..299."""
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(300),
                             in_doubt="skip", service=ONCE)
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    state = open_state(state_url)
    service.faults([{"path": "/users/track", "action": "503", "nth": [2]}])
    first = _run(path, state)
    assert first["rows_failed_with_errors"] == 75
    state.engine.dispose()
    kill_during_request(path, service, sandbox_key, state_url, nth=5)  # the retry's request
    resume_cli(path, state_url, sandbox_key)
    _each_event_once(service)


def test_a_retry_of_a_backfill_request_sends_only_its_own_rows(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(150),
                             in_doubt="skip", service=ONCE)
    _run(path, state)  # 150 events, once
    _late_events_then_a_503(warehouse, service)
    bf = _run(path, state, "backfill", start=T0, end=T0 + timedelta(seconds=1))
    assert bf["rows_failed_with_errors"] == 5
    service.faults([])
    _run(path, state)  # incremental: the retry pass first
    _each_event_once(service)


def test_a_backfill_leaves_a_failed_event_to_its_retry(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(150),
                             in_doubt="skip", service=ONCE)
    service.faults([{"path": "/users/track", "action": "503", "nth": [2]}])
    assert _run(path, state)["rows_failed_with_errors"] == 75
    service.faults([])
    _run(path, state, "backfill", start=T0, end=T0 + timedelta(seconds=1))
    _run(path, state)
    _each_event_once(service)


def test_a_payload_key_of_mixed_types_never_flips_the_schema_guard(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    import json as _json

    from engage_sync.config.files import load_integration
    from engage_sync.read.plan import prepare
    from engage_sync.run.schema_guard import guard_schema

    def rows(values: list[Any]) -> list[dict[str, Any]]:
        return [{"updated_at": T0, "external_id": f"u{i}", "payload": _json.dumps({"zip": v})}
                for i, v in enumerate(values)]

    path = table_integration(warehouse, service, tmp_path, "attributes", rows([12345, "A1B"]))
    plan = prepare(load_integration(path), RunOptions())
    guard_schema(plan, warehouse.engine, state)  # number|string recorded
    warehouse.execute("DELETE FROM users_sync")
    warehouse.insert("users_sync", rows(["A1B", "C2D"]))
    guard_schema(plan, warehouse.engine, state)  # overlaps: no change
    warehouse.execute("DELETE FROM users_sync")
    warehouse.insert("users_sync", rows([10001, 10002]))
    guard_schema(plan, warehouse.engine, state)  # number was seen: no change
    assert state.source_schema("users")["payload.zip"] == "number|string"  # type: ignore[index]


def test_a_retry_of_a_lookback_request_sends_only_its_own_rows(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(150),
                             in_doubt="skip", service=ONCE, lookback="1d")
    _run(path, state)
    _late_events_then_a_503(warehouse, service)
    assert _run(path, state)["rows_failed_with_errors"] == 5
    service.faults([])
    _run(path, state)
    _each_event_once(service)


def test_the_retry_pass_waits_while_another_process_runs_the_integration(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    import pytest

    from engage_sync.errors import RunRefused

    path = table_integration(warehouse, service, tmp_path, "events", event_rows(150),
                             in_doubt="skip", service=ONCE)
    service.faults([{"path": "/users/track", "action": "503", "nth": [2]}])
    assert _run(path, state)["rows_failed_with_errors"] == 75
    service.faults([])
    # another process's live incremental run (a cron overlap, a second scheduler)
    state.open_run("events", "incremental", None, T0, owner="other-host:4242:abcd",
                   lease_seconds=600)
    sent = len(service.requests())
    with pytest.raises(RunRefused):
        sync_file(path, store=state)
    assert len(service.requests()) == sent, \
        "the retry pass sent requests while another process holds the integration's run"


def test_a_value_in_doubt_then_nulled_is_removed(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    import json as _json
    row = lambda m, p: {"updated_at": T0 + timedelta(minutes=m), "external_id": "u1",  # noqa
                        "payload": _json.dumps(p)}
    path = table_integration(warehouse, service, tmp_path, "attributes",
                             [row(0, {"b": "y"})], in_doubt="resend", service=ONCE)
    _run(path, state)  # u1 recorded: b
    warehouse.execute("DELETE FROM users_sync")
    warehouse.insert("users_sync", [row(1, {"b": "y", "a": "x"})])
    n = len(service.requests())
    service.faults([{"path": "/users/track", "action": "500", "nth": [n + 1], "process": True}])
    rec = _run(path, state)
    assert rec["rows_in_doubt"] == 1
    assert service.profile("u1")["attributes"].get("a") == "x"  # processed after all
    service.faults([])
    warehouse.execute("DELETE FROM users_sync")
    warehouse.insert("users_sync", [row(2, {"b": "y", "a": None})])
    _run(path, state)
    assert "a" not in service.profile("u1")["attributes"], \
        "a NULL was never sent: the service keeps a value the source removed"
