"""A folder's integrations side by side (`adapters/folder_runs.py`): 20 integrations on a
PostgreSQL warehouse and state database, 3 at once. While the sandbox holds the first
requests, other integrations run (their records' start and end times overlap); the
connections of each kind never pass the bound the setting gives (pg_stat_activity, sampled
through the run); an integration whose table is missing fails alone, with its own record."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters import folder_runs
from engage_sync.adapters.wiring import sync_file
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore
from engage_sync.status.record import record
from tests.integration.conftest import (
    Service,
    Warehouse,
    event_rows,
    events_table,
    integration_body,
    write_integration,
)

AT_ONCE = 3
COUNT = 20


def _named(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


class _Sampler(threading.Thread):
    """The most connections of each application name seen in pg_stat_activity."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.engine = sa.create_engine(url)
        self.most: dict[str, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            with self.engine.connect() as conn:
                for name, n in conn.exec_driver_sql(
                        "SELECT application_name, count(*) FROM pg_stat_activity "
                        "WHERE starts_with(application_name, 'fold_') GROUP BY 1"):
                    self.most[name] = max(self.most.get(name, 0), int(n))
            time.sleep(0.02)

    def stop(self) -> dict[str, int]:
        self.done.set()
        self.join(10)
        self.engine.dispose()
        return self.most


def _overlaps(records: list[dict[str, Any]]) -> int:
    """The most runs whose (start, finish) intervals hold one moment."""
    edges = sorted([(r["sync_start_time"], 1) for r in records]
                   + [(r["sync_finish_time"], -1) for r in records])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
@pytest.mark.parametrize("state_both", ["postgres"], indirect=True)
def test_a_folders_integrations_run_side_by_side_within_the_connection_bound(
    warehouse: Warehouse, service: Service, state_both: StateStore, tmp_path: Path,
    postgres_url: str
) -> None:
    events_table(warehouse)
    warehouse.insert("events_sync", event_rows(150))
    folder = tmp_path / "folder"
    folder.mkdir()
    body = integration_body(warehouse, service, "events", "events_sync",
                            service={"max_in_flight": 1})
    body["warehouse"]["url"] = _named(warehouse.url, "fold_warehouse")
    for k in range(COUNT):
        write_integration(folder, f"ev{k:02d}", body)
    broken = {**body, "source": {"table": "no_such_table"}}
    write_integration(folder, "ev_broken", broken)
    service.faults([{"path": "/users/track", "action": "delay", "nth": [1, 2],
                     "delay_seconds": 3}])
    url = _named(state_both.engine.url.render_as_string(hide_password=False), "fold_state")
    store = folder_runs.shared_state(url, AT_ONCE)
    sampler = _Sampler(postgres_url)
    sampler.start()
    try:
        results = folder_runs.run_folder(
            sorted(folder.glob("*.yaml")),
            lambda path: sync_file(path, store=store).record, AT_ONCE)
    finally:
        most = sampler.stop()
        store.engine.dispose()
    assert set(results) == {f"ev{k:02d}" for k in range(COUNT)} | {"ev_broken"}
    assert isinstance(results["ev_broken"], Exception)
    assert all(r["rows_synced"] == 150 for k, r in results.items()  # type: ignore[index]
               if k != "ev_broken")
    names = [f"ev{k:02d}" for k in range(COUNT)] + ["ev_broken"]
    records = [record(r) for n in names for r in state_both.runs_newest_first(n, 0, 1)]
    assert len(records) == COUNT + 1
    assert [r["job_status"] for r in records].count("success") == COUNT
    assert _overlaps(records) >= 2, records  # side by side
    assert most.get("fold_state", 0) <= folder_runs.state_connections(AT_ONCE), most
    assert 0 < most.get("fold_warehouse", 0) <= 2 * AT_ONCE, most


def test_the_setting_is_a_whole_number_of_at_least_one() -> None:
    assert folder_runs.folder_concurrency(None, {}) == folder_runs.DEFAULT
    assert folder_runs.folder_concurrency(None, {folder_runs.ENV: "7"}) == 7
    assert folder_runs.folder_concurrency(2, {folder_runs.ENV: "7"}) == 2
    for bad in ("0", "four", "-1"):
        with pytest.raises(ConfigError, match="folder_concurrency"):
            folder_runs.folder_concurrency(None, {folder_runs.ENV: bad})


def test_ranks_run_one_after_another(tmp_path: Path) -> None:
    """An identity before the data kinds: never side by side with them."""
    for name, kind in (("a_events", "events"), ("b_attrs", "attributes"),
                       ("c_identify", "identify"), ("d_events", "events")):
        (tmp_path / f"{name}.yaml").write_text(f"kind: {kind}\n")
    spans: dict[str, tuple[float, float]] = {}

    def run(path: Path) -> str:
        began = time.monotonic()
        time.sleep(0.2)
        spans[path.stem] = (began, time.monotonic())
        return path.stem

    groups = folder_runs.rank_groups(sorted(tmp_path.glob("*.yaml")))
    folder_runs.run_folder(sorted(tmp_path.glob("*.yaml")), run, 4)
    first = [p.stem for p in groups[0]]
    assert first == ["c_identify"]
    assert all(spans["c_identify"][1] <= spans[n][0] for n in spans if n != "c_identify")
