"""A folder's runs share one read of the workspace's attribute definitions: three integrations
of one workspace walk `GET /custom_attributes` once (the key check's page and the page a
mapped name is on), and a key without the read's permission is asked once, each run warning
once and going on."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.cli.main import main
from engage_sync.deliver.key_check import CHECK_PATH
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, Warehouse, integration_body, write_integration

NAMES = ("crm_a", "crm_b", "crm_c")


def _folder(service: Service, tmp_path: Path) -> Path:
    """Three integrations of one workspace; `zodiac_sign` is on the definitions' second page."""
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    wh.create("customers", [("UPDATED_AT", sa.DateTime()), ("CUSTOMER_ID", sa.String()),
                            ("SIGN", sa.String()), ("SCORE", sa.Integer())])
    wh.insert("customers", [{"UPDATED_AT": T0, "CUSTOMER_ID": f"c{i}", "SIGN": "leo",
                             "SCORE": i} for i in range(3)])
    wh.engine.dispose()
    folder = tmp_path / "config"
    folder.mkdir()
    for name in NAMES:
        write_integration(folder, name, integration_body(wh, service, "attributes", "customers",
                          mapping={"identifier": {"external_id": "CUSTOMER_ID"},
                                   "attributes": {"SIGN": "zodiac_sign",
                                                  "SCORE": "loyalty_points"}}))
    return folder


def _run_folder(folder: Path, state: StateStore, capsys: pytest.CaptureFixture[str]
                ) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["--log-level", "WARNING", "run", str(folder), "--no-prefect", "--state-url",
                 state.engine.url.render_as_string(hide_password=False)])
    return code, [line for line in capsys.readouterr().err.splitlines() if "(403)" in line]


def test_a_folder_of_three_integrations_walks_the_definitions_once(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code, warned = _run_folder(_folder(service, tmp_path), state, capsys)
    assert code == 0 and warned == []
    walked = service.requests(CHECK_PATH)
    assert len(walked) == 2, walked  # page 1 (the key check) and page 2, for all three runs
    assert walked[0]["query"] == "" and walked[1]["query"].startswith("cursor=")
    for name in NAMES:
        (record,) = state.runs_newest_first(name, 0, 10)
        assert record["job_status"] == "success" and record["rows_synced"] == 3


def test_a_key_without_the_read_permission_is_asked_once_and_each_run_warns_and_goes_on(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGAGE_API_KEY", "sandbox-track-only-key")
    code, warned = _run_folder(_folder(service, tmp_path), state, capsys)
    assert code == 0
    assert len(service.requests(CHECK_PATH)) == 1
    assert len(warned) == 3
    assert all(f"integration {n}:" in w for n, w in zip(NAMES, warned, strict=True))
    assert len(service.requests("/users/track")) >= 3
