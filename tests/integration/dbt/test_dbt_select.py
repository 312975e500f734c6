"""`engage-sync run FOLDER --select` and `--after` against the checked-in dbt project's
artifacts (tests/fixtures/dbt/shop/target, built with dbt-duckdb): a real DuckDB warehouse
holding the models' tables, the sandbox over loopback, runs without Prefect.

The project: braze_users and braze_order_totals are tagged braze; stg_orders failed in the
dbt run and so braze_order_totals was skipped; crm_users is untagged and built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.cli.main import main
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, write_integration

DBT = Path(__file__).resolve().parents[2] / "fixtures" / "dbt" / "shop" / "target"
MANIFEST = DBT / "manifest.json"
RUN_RESULTS = DBT / "run_results.json"
ATTRIBUTE = {"users": "plan", "orders": "order_total", "crm": "crm_plan"}


def folder_of(tmp_path: Path, svc: Service) -> Path:
    """Three tables in a DuckDB file and three integration files: `users` finds its model by
    its table (upper case, as a user may write it), `orders` names its model, `crm` by table."""
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for table, column, value in (("braze_users", "plan_name", "'gold'"),
                                     ("braze_order_totals", "order_total", "42"),
                                     ("crm_users", "crm_plan", "'silver'")):
            conn.exec_driver_sql(
                f"CREATE TABLE {table} AS SELECT 'c' || i AS customer_id, {value} AS {column}, "
                f"TIMESTAMP '{T0:%Y-%m-%d %H:%M:%S}' AS updated_at FROM range(5) t(i)")
    engine.dispose()
    folder = tmp_path / "integrations"
    folder.mkdir()

    def body(table: str, column: str, attribute: str, **extra: Any) -> dict[str, Any]:
        return {"kind": "attributes", "warehouse": {"url": url}, "source": {"table": table},
                "mapping": {"identifier": {"external_id": "CUSTOMER_ID"},
                            "attributes": {column: attribute}},
                "service": {"base_url": svc.base_url, "retry_deadline_seconds": 60}, **extra}

    write_integration(folder, "users", body("BRAZE_USERS", "PLAN_NAME", "plan"))
    write_integration(folder, "orders", body("braze_order_totals", "ORDER_TOTAL", "order_total",
                                             dbt={"model": "braze_order_totals"}))
    write_integration(folder, "crm", body("crm_users", "CRM_PLAN", "crm_plan"))
    return folder


def sent_attributes(svc: Service) -> set[str]:
    """The attribute names the sandbox received in /users/track."""
    return {key for request in svc.requests() for obj in request["body"].get("attributes", [])
            for key in obj if key in ATTRIBUTE.values()}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(["--log-level", "WARNING", "run", *argv, "--no-prefect"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def test_select_tag_runs_exactly_the_tagged_integrations(
        tmp_path: Path, service: Service, state: StateStore,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = folder_of(tmp_path, service)
    code, out, err = cli(capsys, str(folder), "--select", "tag:braze", "--manifest",
                         str(MANIFEST), "--state-url", str(state.engine.url))
    assert code == 0, err
    assert set(out["runs"]) == {"users", "orders"}
    assert all(r["job_status"] == "success" for r in out["runs"].values())
    assert (state.count_runs("users"), state.count_runs("orders"), state.count_runs("crm")) \
        == (1, 1, 0)
    assert sent_attributes(service) == {"plan", "order_total"}


def test_selectors_are_a_union(tmp_path: Path, service: Service, state: StateStore,
                               capsys: pytest.CaptureFixture[str]) -> None:
    folder = folder_of(tmp_path, service)
    code, out, err = cli(capsys, str(folder), "--select", "model:crm_users, path:models/marts/"
                         "braze_u*", "--manifest", str(MANIFEST), "--dry-run",
                         "--state-url", str(state.engine.url))
    assert code == 0, err
    assert set(out["runs"]) == {"users", "crm"}


def test_after_a_failed_upstream_model_skips_exactly_its_integrations(
        tmp_path: Path, service: Service, state: StateStore,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = folder_of(tmp_path, service)
    code, out, err = cli(capsys, str(folder), "--after", str(RUN_RESULTS), "--manifest",
                         str(MANIFEST), "--state-url", str(state.engine.url))
    assert code == 0, err
    assert set(out["runs"]) == {"users", "crm"}
    assert set(out["skipped"]) == {"orders"}
    lines = [line for line in err.splitlines() if "skipped" in line]
    assert len(lines) == 1 and "orders" in lines[0] and "stg_orders failed" in lines[0], err
    assert (state.count_runs("users"), state.count_runs("orders"), state.count_runs("crm")) \
        == (1, 1, 1)
    _, status, _ = status_of(capsys, "orders", state)
    [record] = status["results"]
    assert record["job_status"] == "error" and record["rows_synced"] == 0
    assert record["message"].startswith("skipped: model braze_order_totals was skipped")
    assert "stg_orders failed" in record["message"]
    assert sent_attributes(service) == {"plan", "crm_plan"}


def status_of(capsys: pytest.CaptureFixture[str], name: str, state: StateStore
              ) -> tuple[int, dict[str, Any], str]:
    code = main(["status", name, "--state-url", str(state.engine.url)])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_a_model_the_manifest_lacks_names_file_and_key(
        tmp_path: Path, service: Service, state: StateStore,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = folder_of(tmp_path, service)
    path = folder / "orders.yaml"
    path.write_text(path.read_text().replace("model: braze_order_totals", "model: gone"))
    code, _, err = cli(capsys, str(folder), "--select", "tag:braze", "--manifest",
                         str(MANIFEST), "--state-url", str(state.engine.url))
    assert code == 2
    assert f"file {path}" in err and "key dbt.model" in err and "'gone'" in err
    assert state.count_runs("users") == 0  # nothing ran
