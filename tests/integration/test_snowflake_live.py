"""Snowflake live, through its real connector: fakesnow's HTTP server stands in for the
account, and the integration file is the README's Snowflake example with `connect_args`
(host, port, protocol, the password from `${VAR}`). The service's sync format (VARIANT
PAYLOAD): every user lands at its latest value, a re-run bills 0 points, 100 changed users
bill exactly their changed attribute, and a run in 2 partitions syncs its rows (the
partition bucket's SQL is evaluated by the emulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, write_integration
from tests.snowflake_emulator import PASSWORD, Emulator

USERS = 500
CHANGED = 100
TABLE = ("CREATE OR REPLACE TABLE USERS_SYNC (UPDATED_AT TIMESTAMP_NTZ, EXTERNAL_ID VARCHAR, "
         "PAYLOAD VARIANT)")


def _rows(at: str, first: int, last: int, plan: str, offset: int = 0) -> str:
    return (f"INSERT INTO USERS_SYNC SELECT '{at}'::TIMESTAMP_NTZ, 'u' || i::VARCHAR, "
            f"PARSE_JSON('{{\"plan\": \"{plan}\", \"n\": ' || (i + {offset})::VARCHAR || '}}') "
            f"FROM (SELECT seq4() AS i FROM TABLE(GENERATOR(ROWCOUNT => {last}))) "
            f"WHERE i >= {first}")


def _file(folder: Path, name: str, emulator: Emulator, service: Service,
          **extra: Any) -> Path:
    args = {**emulator.connect_args(), "password": "${SNOWFLAKE_PASSWORD}"}
    return write_integration(folder, name, {
        "kind": "attributes",
        "warehouse": {"url": emulator.url, "connect_args": args},
        "source": {"table": "USERS_SYNC"},
        "payload": {"identifier": "external_id"},
        "service": {"base_url": service.base_url},
        **extra,
    })


def test_the_service_sync_format_on_snowflake(
        snowflake: Emulator, service: Service, state: StateStore, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNOWFLAKE_PASSWORD", PASSWORD)
    snowflake.execute(
        TABLE,
        _rows("2026-01-01 00:00:00", 0, USERS, "free"),
        _rows("2026-01-01 01:00:00", 0, CHANGED, "pro"))  # later rows of the first 100
    path = _file(tmp_path, "users", snowflake, service)

    first = sync_file(path, store=state).record
    assert first is not None and first["job_status"] == "success", first
    # one object per user: a user's later row is merged into the first read, counted unchanged
    assert (first["rows_synced"], first["rows_unchanged"]) == (USERS, CHANGED)
    assert service.profile("u7")["attributes"]["plan"] == "pro"  # type: ignore[index]
    assert service.profile("u321")["attributes"] == {"plan": "free", "n": 321}  # type: ignore[index]

    again = sync_file(path, store=state).record
    assert again is not None and again["data_points_sent"] == 0 and again["rows_read"] == 0

    snowflake.execute(_rows("2026-01-01 02:00:00", 200, 200 + CHANGED, "free", offset=10_000))
    changed = sync_file(path, store=state).record
    assert changed is not None
    assert (changed["rows_synced"], changed["data_points_sent"]) == (CHANGED, CHANGED)
    assert service.profile("u250")["attributes"]["n"] == 10_250  # type: ignore[index]


def test_a_run_in_two_partitions_on_snowflake(
        snowflake: Emulator, service: Service, state: StateStore, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNOWFLAKE_PASSWORD", PASSWORD)
    snowflake.execute(TABLE, _rows("2026-01-01 00:00:00", 0, USERS, "free"))
    path = _file(tmp_path, "users_split", snowflake, service, diff="off")
    record = sync_file(path, options=RunOptions(partitions=2), store=state).record
    assert record is not None and record["job_status"] == "success", record
    assert record["rows_synced"] == USERS
    parts = state.partition_runs(record["run_id"])
    assert len(parts) == 2 and all(p["rows_synced"] > 0 for p in parts)
    assert sum(p["rows_synced"] for p in parts) == USERS
    assert service.counters()["attributes_processed"] == USERS
