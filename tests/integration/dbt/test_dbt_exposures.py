"""`engage-sync dbt-exposures FOLDER`: one dbt exposure file per integration that reads a model
of the checked-in project's manifest, depending on that model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engage_sync.cli.main import main
from tests.integration.conftest import Service
from tests.integration.dbt.test_dbt_select import MANIFEST, folder_of


def test_one_exposure_per_integration_on_its_model(
        tmp_path: Path, service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    folder = folder_of(tmp_path, service)
    crm = (folder / "crm.yaml").read_text()
    (folder / "elsewhere.yaml").write_text(crm.replace("table: crm_users", "table: no_model"))
    out = tmp_path / "exposures"
    assert main(["dbt-exposures", str(folder), "--manifest", str(MANIFEST),
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "integration elsewhere reads no dbt model" in err
    files = sorted(p.name for p in out.iterdir())
    assert files == ["engage_sync_crm.yml", "engage_sync_orders.yml", "engage_sync_users.yml"]
    body = yaml.safe_load((out / "engage_sync_users.yml").read_text())
    [exposure] = body["exposures"]
    assert body["version"] == 2
    assert exposure["name"] == "engage_sync_users" and exposure["type"] == "application"
    assert exposure["depends_on"] == ["ref('braze_users')"] and exposure["owner"]["name"]
    orders = yaml.safe_load((out / "engage_sync_orders.yml").read_text())
    assert orders["exposures"][0]["depends_on"] == ["ref('braze_order_totals')"]
