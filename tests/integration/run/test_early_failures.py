"""A run stopped before it reads leaves a record (a missing table, a query over one,
a warehouse out of reach, a refused key with nothing to send), seen where an operator looks:
`engage-sync status`, the service-format endpoint, `/metrics` and the write-back; the key is
checked once a run, partitioned or not, in a rate group no run sends to."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.status_server import create_app
from engage_sync.cli.main import main
from engage_sync.deliver.key_check import CHECK_PATH
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    integration_body,
    served,
    user_rows,
    users_table,
    write_integration,
)

TOKEN = "test-token-0123456789abcdef"
PASSWORD = "pw-q8z3k1m"  # never in a record or a line


def _run(path: Path, state: StateStore, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`engage-sync run PATH --no-prefect`: its exit code and what it said on stderr."""
    capsys.readouterr()
    code = main(["--log-level", "WARNING", "run", str(path), "--no-prefect",
                 "--state-url", state.engine.url.render_as_string(hide_password=False)])
    return code, capsys.readouterr().err


def _seen(name: str, folder: Path, state: StateStore,
          capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The newest record of `name` in `engage-sync status`, whose service fields the
    service-format endpoint serves the same; `/metrics` counts it by its status."""
    capsys.readouterr()
    url = state.engine.url.render_as_string(hide_password=False)
    assert main(["status", name, "--state-url", url]) == 0
    shown = json.loads(capsys.readouterr().out)["results"]
    assert shown, "engage-sync status shows no record"
    with served(create_app(state, TOKEN, folder), TOKEN) as client:
        answer = client.get(f"/cdi/integrations/{name}/job_sync_status")
        assert answer.status_code == 200, answer.text
        served_record = answer.json()["results"][0]
        metrics = client.get("/metrics").text
    assert served_record["job_status"] == shown[0]["job_status"]  # the service's fields only
    assert served_record == {k: shown[0][k] for k in served_record}
    status = shown[0]["job_status"]
    assert f'engage_sync_runs_total{{integration="{name}",job_status="{status}"}} 1' in metrics
    return dict(shown[0])


def _one_line(said: str, name: str) -> str:
    lines = [line for line in said.splitlines() if line.startswith("engage-sync:")]
    assert len(lines) == 1, said
    assert f"integration {name}" in lines[0] and PASSWORD not in said
    return lines[0]


@pytest.mark.parametrize("source", [{"table": "no_such_table"},
                                    {"query": "SELECT * FROM no_such_table"}])
def test_a_missing_table_leaves_an_error_record(
    source: dict[str, str], warehouse: Warehouse, service: Service, state: StateStore,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    body = integration_body(warehouse, service, "attributes", "ignored")
    path = write_integration(tmp_path, "missing", {**body, "source": source})
    code, said = _run(path, state, capsys)
    assert code != 0
    assert "no_such_table" in _one_line(said, "missing")
    record = _seen("missing", tmp_path, state, capsys)
    assert record["job_status"] == "error"
    assert record["message"].startswith("integration missing: cannot read the source")
    assert "no_such_table" in record["message"] and "\n" not in record["message"]
    assert not service.requests("/users/track")


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("where", ["postgres", "duckdb"])
def test_an_unreachable_warehouse_leaves_an_error_record(
    where: str, service: Service, state: StateStore, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = (f"postgresql+psycopg://sync:{PASSWORD}@127.0.0.1:{_dead_port()}/warehouse"
           if where == "postgres" else f"duckdb:///{tmp_path / 'no' / 'such' / 'dir.duckdb'}")
    path = write_integration(tmp_path, "away", {
        "kind": "attributes", "warehouse": {"url": url}, "source": {"table": "users_sync"},
        "service": {"base_url": service.base_url}})
    code, said = _run(path, state, capsys)
    assert code != 0
    assert "cannot connect to the warehouse" in _one_line(said, "away")
    record = _seen("away", tmp_path, state, capsys)
    assert record["job_status"] == "error"
    assert record["message"].startswith("integration away: cannot connect to the warehouse")
    assert PASSWORD not in json.dumps(record)
    assert not service.requests("/users/track")


def test_a_missing_table_is_written_back(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The warehouse answers, the table is missing: the error record is written back."""
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    path = write_integration(tmp_path, "gone", {
        "kind": "attributes", "warehouse": {"url": url}, "source": {"table": "no_such_table"},
        "service": {"base_url": service.base_url}, "writeback": {}})
    code, _ = _run(path, state, capsys)
    assert code != 0
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT job_status FROM engage_sync_runs WHERE integration = 'gone'").all()
    finally:
        engine.dispose()
    assert [r[0] for r in rows] == ["error"]


def test_a_wrong_key_with_nothing_to_send_is_an_error(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    users_table(warehouse)  # empty: nothing to send
    path = write_integration(tmp_path, "keyed", integration_body(
        warehouse, service, "attributes", "users_sync"))
    monkeypatch.setenv("ENGAGE_API_KEY", "not-the-key-0000")
    code, said = _run(path, state, capsys)
    assert code != 0
    line = _one_line(said, "keyed")
    assert "refused the API key" in line and "ENGAGE_API_KEY" in line
    assert "not-the-key-0000" not in said
    record = _seen("keyed", tmp_path, state, capsys)
    assert record["job_status"] == "error" and "refused the API key" in record["message"]
    assert "not-the-key-0000" not in json.dumps(record)
    assert [r["status"] for r in service.requests(CHECK_PATH)] == [401]
    assert not service.requests("/users/track")


@pytest.mark.parametrize("partitions", [1, 2])
def test_the_key_is_checked_once_a_run(
    partitions: int, warehouse: Warehouse, service: Service, state: StateStore,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A right key: one GET of the check per run, partitioned or not, and the run's own
    requests as before."""
    users_table(warehouse)
    warehouse.insert("users_sync", user_rows(200))
    path = write_integration(tmp_path, "once", integration_body(
        warehouse, service, "attributes", "users_sync", partitions=partitions))
    code, said = _run(path, state, capsys)
    assert code == 0, said
    assert [r["status"] for r in service.requests(CHECK_PATH)] == [200]
    record = _seen("once", tmp_path, state, capsys)
    assert (record["job_status"], record["rows_synced"]) == ("success", 200)
