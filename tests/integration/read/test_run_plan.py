"""A run is prepared once: its file is read, its kind resolved, its source spec built and its
warehouse's connect_args expanded once, and every stage takes the plan instead of deriving
them again (`read/plan.py`).

A partitioned run prepares once in the coordinator and once in each partition: a partition
may run in another process (a Dask worker), which gets descriptors only, never objects, so it
reads the file and prepares its own plan, whether it runs there or in a thread."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from engage_sync import kinds
from engage_sync.adapters import wiring
from engage_sync.adapters.wiring import sync_file
from engage_sync.config import secrets
from engage_sync.config.files import load_integration
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import ConfigError
from engage_sync.read import plan
from engage_sync.run import windows
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    event_rows,
    integration_body,
    table_integration,
    user_rows,
)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often the run reads its file, resolves its kind, builds its source spec and expands
    its warehouse's connect_args."""
    counted: Counter[str] = Counter()

    def counting(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return real(*args, **kwargs)
        return call

    # the registry's lookup, which every `kind_of` goes through, however a module imported it
    monkeypatch.setattr(kinds, "get", counting("kind", kinds.get))
    monkeypatch.setattr(plan, "source_spec", counting("spec", plan.source_spec))
    monkeypatch.setattr(secrets, "connect_args", counting("args", secrets.connect_args))
    monkeypatch.setattr(wiring, "load_integration", counting("file", wiring.load_integration))
    return counted


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
@pytest.mark.parametrize("mode", ["incremental", "full_resync"])
def test_a_run_resolves_its_kind_and_source_spec_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    calls: Counter[str], mode: str,
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(120),
                             writeback={})
    record = sync_file(path, options=RunOptions(mode=mode), store=state).record  # type: ignore[arg-type]
    assert record is not None and record["rows_synced"] == 120, record
    assert calls == {"file": 1, "kind": 1, "spec": 1, "args": 1}


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_dry_run_resolves_them_once_too(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    calls: Counter[str],
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(30))
    outcome = sync_file(path, options=RunOptions(dry_run=True), store=state)
    assert outcome.dry_run is not None and outcome.dry_run.rows == 30
    assert calls == {"file": 1, "kind": 1, "spec": 1, "args": 1}


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_backfill_samples_its_cursor_type_once(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its window and its end are aligned to one sample of the cursor column
    (`run/windows.Windows`), not one sample each."""
    sampled: list[object] = []
    real = windows.sample_cursor

    def sample(*args: Any) -> Any:
        sampled.append(args)
        return real(*args)

    monkeypatch.setattr(windows, "sample_cursor", sample)
    path = table_integration(warehouse, service, tmp_path, "attributes",
                             user_rows(60, step=timedelta(seconds=1)))
    options = RunOptions(mode="backfill", start=T0, end=T0 + timedelta(seconds=30))
    record = sync_file(path, options=options, store=state).record
    assert record is not None and record["rows_synced"] == 30, record
    assert len(sampled) == 1


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_partitioned_run_prepares_once_and_once_in_each_partition(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    calls: Counter[str],
) -> None:
    path = table_integration(warehouse, service, tmp_path, "events", event_rows(200))
    record = sync_file(path, options=RunOptions(partitions=2), store=state).record
    assert record is not None and record["rows_synced"] == 200, record
    # the coordinator, then 2 partitions
    assert calls == {"file": 3, "kind": 3, "spec": 3, "args": 3}


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_the_plan_expands_the_warehouse_url_once_and_never_shows_it(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = integration_body(warehouse, service, "events", "events_sync")
    body["warehouse"] = {"url": "${WH_URL}"}
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    monkeypatch.delenv("WH_URL", raising=False)
    with pytest.raises(ConfigError) as missing:  # at the plan, naming its key
        plan.prepare(load_integration(path), RunOptions())
    assert "warehouse.url" in str(missing.value) and "WH_URL" in str(missing.value)
    monkeypatch.setenv("WH_URL", warehouse.url)
    prepared = plan.prepare(load_integration(path), RunOptions())
    assert prepared.spec.url == warehouse.url  # the engines connect there, unexpanded again
    assert warehouse.url not in repr(prepared.spec)
