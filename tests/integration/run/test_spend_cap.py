"""The spend cap: a run predicted (by its dry run) to bill more data points than
`max_data_points`, or than what is left of the workspace's `max_data_points_per_day`, stops
before its first request with a `config_error` record and one line naming both figures."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from engage_sync.cli.main import main
from engage_sync.config.files import load_integration
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    integration_body,
    table_integration,
    user_rows,
    users_table,
    write_integration,
)

ROWS = 5_000  # two attributes each (`plan`, `n`): 10,000 data points


def _url(state: StateStore) -> str:
    return state.engine.url.render_as_string(hide_password=False)


def _run(path: Path, state: StateStore, capsys: pytest.CaptureFixture[str],
         *extra: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["--log-level", "WARNING", "run", str(path), "--no-prefect",
                 "--state-url", _url(state), *extra])
    said = capsys.readouterr().err
    return code, [line for line in said.splitlines() if line.startswith("engage-sync:")]


def test_a_run_over_max_data_points_stops_before_its_first_request(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    wh = Warehouse("duckdb", f"duckdb:///{tmp_path / 'wh.duckdb'}",
                   sa.create_engine(f"duckdb:///{tmp_path / 'wh.duckdb'}"))
    path = table_integration(wh, service, tmp_path, "attributes", user_rows(ROWS),
                             max_data_points=5000)
    wh.engine.dispose()
    code, lines = _run(path, state, capsys)
    assert code != 0
    assert len(lines) == 1, lines
    assert "10,000" in lines[0] and "5,000" in lines[0] and "max_data_points" in lines[0]
    assert service.requests("/users/track") == []
    (record,) = state.runs_newest_first("users", 0, 10)
    assert record["job_status"] == "config_error"
    assert "10,000" in (record["message"] or "")

    code, lines = _run(path, state, capsys, "--allow-points", "10000")  # one run let through
    assert code == 0, lines
    assert service.requests("/users/track")
    day = datetime.now(UTC).date().isoformat()
    assert state.points_of_day(service.base_url.rstrip("/"), day) == (10_000, 10_000)


@pytest.mark.parametrize("key, value", [("max_data_points", 0),
                                        ("max_data_points_per_day", "lots")])
def test_a_bad_cap_names_file_and_key(key: str, value: object, service: Service,
                                      tmp_path: Path) -> None:
    wh = Warehouse("duckdb", "duckdb:///unused.duckdb", sa.create_engine("duckdb://"))
    path = tmp_path / "capped.yaml"
    body = integration_body(wh, service, "attributes", "users_sync", **{key: value})
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(ConfigError) as raised:
        load_integration(path)
    assert "capped" in str(raised.value) and key in str(raised.value)
    path.write_text(yaml.safe_dump({**body, key: 5000}))
    assert getattr(load_integration(path), key) == 5000


def test_two_processes_under_one_daily_cap_one_runs(
    service: Service, tmp_path: Path, sandbox_key: str,
) -> None:
    """Two integrations of one workspace, 10,000 points predicted each, a daily cap of 15,000,
    started at once as two processes: one runs, the other stops before its first request."""
    paths = []
    for name in ("alpha", "beta"):
        url = f"duckdb:///{tmp_path / name}.duckdb"
        wh = Warehouse("duckdb", url, sa.create_engine(url))
        users_table(wh)
        wh.insert("users_sync", user_rows(ROWS, prefix=name[0]))
        wh.engine.dispose()
        paths.append(write_integration(tmp_path, name, integration_body(
            wh, service, "attributes", "users_sync", max_data_points_per_day=15_000)))
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    env = {**os.environ, "ENGAGE_API_KEY": sandbox_key}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "engage_sync.cli.main", "--log-level", "WARNING", "run",
         str(p), "--no-prefect", "--state-url", state_url],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in paths]
    outcomes = [(proc.wait(timeout=300), proc.communicate()[1].decode()) for proc in procs]
    codes = sorted(code for code, _ in outcomes)
    assert codes[0] == 0 and codes[1] != 0, outcomes
    stopped = next(i for i, (code, _) in enumerate(outcomes) if code != 0)
    lines = [ln for ln in outcomes[stopped][1].splitlines() if ln.startswith("engage-sync:")]
    assert len(lines) == 1 and "15,000" in lines[0] and "10,000" in lines[0], lines
    prefix = ("alpha", "beta")[stopped][0]
    sent = {p["external_id"][0] for p in service.profiles() if p.get("external_id")}
    assert prefix not in sent and len(sent & {"a", "b"}) == 1
    state = StateStore.from_url(state_url)
    (record,) = state.runs_newest_first(("alpha", "beta")[stopped], 0, 10)
    assert record["job_status"] == "config_error"
    state.engine.dispose()


def test_reservations_in_threads_never_pass_the_cap(state_both: StateStore) -> None:
    """Twenty reservations of 1,000 at once under a cap of 15,000: fifteen pass."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        granted = list(pool.map(
            lambda _: state_both.reserve_points("http://w", "2026-01-01", 1_000, 15_000)[0],
            range(20)))
    assert granted.count(True) == 15
    assert state_both.points_of_day("http://w", "2026-01-01") == (15_000, 0)


def test_a_partitioned_run_counts_once(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Two partitions: predicted and reserved once for the whole run, billed once."""
    wh = Warehouse("duckdb", f"duckdb:///{tmp_path / 'wh.duckdb'}",
                   sa.create_engine(f"duckdb:///{tmp_path / 'wh.duckdb'}"))
    path = table_integration(wh, service, tmp_path, "attributes", user_rows(ROWS),
                             partitions=2, max_data_points_per_day=15_000)
    wh.engine.dispose()
    code, lines = _run(path, state, capsys)
    assert code == 0, lines
    day = datetime.now(UTC).date().isoformat()
    assert state.points_of_day(service.base_url.rstrip("/"), day) == (10_000, 10_000)
    code, lines = _run(path, state, capsys, "--mode", "full_resync", "--send-whole")
    assert code != 0 and "10,000 are taken" in lines[0], lines
