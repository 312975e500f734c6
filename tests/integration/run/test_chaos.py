"""The chaos test: three integrations (attributes; events under `resend`; events
under `skip`) against the sandbox with 429 storms, 5xx (before and after processing) and
dropped connections injected, killed with SIGKILL at ten moments (several as soon as a resumed
run sends its first request) and resumed each time. At the end: every attribute at its final
value; under `resend` no event lost and every doubled event named as a possible duplicate;
under `skip` no event twice and every event that did not arrive named in doubt; and the
records' counts adding up to the rows in the warehouse. Prints its figures."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters.wiring import open_state
from engage_sync.state.store import StateStore
from engage_sync.status.record import record
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    events_table,
    integration_body,
    run_cli,
    users_table,
    write_integration,
)

USERS, VERSIONS, EVENTS = 300, 5, 1500
KILLS = {"users": 3, "ev_resend": 4, "ev_skip": 3}  # ten in all
FAULTS = [  # the first matching rule wins; a held request is what a kill often catches
    {"path": "/users/track", "action": "delay", "share": 0.15, "seed": 5, "delay_seconds": 0.5},
    {"path": "/users/track", "action": "429", "nth": list(range(20, 28))},  # a storm
    {"path": "/users/track", "action": "429", "share": 0.05, "seed": 1},
    {"path": "/users/track", "action": "500", "share": 0.04, "seed": 2},
    {"path": "/users/track", "action": "504", "process": True, "share": 0.04, "seed": 3},
    {"path": "/users/track", "action": "drop", "share": 0.04, "seed": 4},
    # every other request answered 0.25 s late, so that a run cannot send its last request and
    # exit between two looks of `_run_until_done` (under load a kill was missed once that way)
    {"path": "/users/track", "action": "delay", "delay_seconds": 0.25},
]


def _tables(wh: Warehouse) -> None:
    users_table(wh)
    wh.insert("users_sync", [
        {"updated_at": T0 + timedelta(seconds=v * USERS + u), "external_id": f"c{u:04d}",
         "payload": json.dumps({"v": v})} for v in range(VERSIONS) for u in range(USERS)])
    for table, prefix in (("ev_resend", "r"), ("ev_skip", "s")):
        events_table(wh, table)
        wh.insert(table, [
            {"event_id": f"{prefix}{i:05d}", "updated_at": T0 + timedelta(seconds=i),
             "external_id": f"c{i % USERS:04d}",
             "payload": json.dumps({"name": "x", "properties": {"eid": f"{prefix}{i:05d}"}})}
            for i in range(EVENTS)])


def _run_until_done(path: Path, state_url: str, key: str, service: Service, kills: int,
                    rng: random.Random) -> int:
    """Run the integration to the end, SIGKILLing it `kills` times once it has sent 1 to 3
    requests (1: right as a resumed run starts sending). Returns the kills made."""
    made = 0
    while True:
        proc = run_cli(path, state_url, key)
        if made < kills:
            before = len(service.requests())
            at = rng.choice([1, 1, 2, 2, 3])
            while proc.poll() is None and len(service.requests()) < before + at:
                time.sleep(0.02)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                made += 1
                continue
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), err.decode()[-2000:]
        return made


def _records(state: StateStore, name: str) -> list[dict[str, Any]]:
    runs = state.runs_newest_first(name, 0, 1000)
    assert all(r["job_status"] != "running" for r in runs)
    return [record(r) for r in runs]


def _named(state: StateStore, name: str, kind: str) -> set[str]:
    return {e["row_key"] for e in state.errors(name, limit=100_000) if e["kind"] == kind}


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_chaos(warehouse: Warehouse, service: Service, sandbox_key: str,
               tmp_path: Path) -> None:
    started = time.monotonic()
    _tables(warehouse)
    warehouse.engine.dispose()  # DuckDB: one process at a time may open the file
    paths = {
        # every row sent: the rows counted below are the rows read, each once
        "users": write_integration(tmp_path, "users", integration_body(
            warehouse, service, "attributes", "users_sync", superseded_rows="send")),
        **{name: write_integration(tmp_path, name, integration_body(
            warehouse, service, "events", name, in_doubt=name.removeprefix("ev_")))
           for name in ("ev_resend", "ev_skip")},
    }
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    service.faults(FAULTS)
    rng = random.Random(12)
    kills = sum(_run_until_done(paths[n], state_url, sandbox_key, service, k, rng)
                for n, k in KILLS.items())
    state = open_state(state_url)

    final = {p["external_id"]: p["attributes"].get("v") for p in service.profiles()}
    assert final == {f"c{u:04d}": VERSIONS - 1 for u in range(USERS)}  # every final value
    arrived = Counter(service.event_ids())
    resend = {f"r{i:05d}" for i in range(EVENTS)}
    skip = {f"s{i:05d}" for i in range(EVENTS)}
    doubled = {e for e in resend if arrived[e] > 1}
    assert resend <= set(arrived)  # resend: nothing lost
    assert doubled <= _named(state, "ev_resend", "duplicate")
    assert all(arrived[e] <= 1 for e in skip)  # skip: never twice
    lost = skip - set(arrived)
    assert lost <= _named(state, "ev_skip", "in_doubt")
    figures = {"kills": kills, "rows": USERS * VERSIONS + 2 * EVENTS}
    for name, rows in (("users", USERS * VERSIONS), ("ev_resend", EVENTS), ("ev_skip", EVENTS)):
        records = _records(state, name)
        assert sum(r["rows_read"] for r in records) == rows, (name, records)
        figures[f"{name}_in_doubt"] = sum(r["rows_in_doubt"] for r in records)
        figures[f"{name}_possibly_duplicated"] = sum(
            r["rows_possibly_duplicated"] for r in records)
    assert figures["ev_resend_possibly_duplicated"] >= len(doubled)
    # every row counted in doubt is named, whatever kill came after its request
    assert len(_named(state, "ev_skip", "in_doubt")) == figures["ev_skip_in_doubt"]
    figures |= {"lost_skip": len(lost), "duplicated_resend": len(doubled),
                "seconds": round(time.monotonic() - started)}
    assert kills == sum(KILLS.values()), figures
    print("chaos figures:", json.dumps(figures))
