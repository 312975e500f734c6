"""`engage-sync plan FOLDER --against REF` in a temporary Git repository: a real DuckDB
warehouse, the sandbox over loopback (its seeded custom attributes), the state database of
the runs the plan predicts."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from engage_sync.adapters.wiring import run_direct
from engage_sync.cli.main import main
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service

USERS = 100
NEWER = 30  # rows of users 0..29 an hour later; half of them with a new plan


def git(repo: Path, *argv: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           *argv], cwd=repo, check=True, capture_output=True, text=True).stdout


def write(path: Path, body: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(body, sort_keys=False))


@pytest.fixture
def repo(tmp_path: Path, service: Service) -> tuple[Path, Path, dict[str, Any]]:
    """A repository whose folder `integrations` holds users.yaml and crm.yaml (commit 1),
    and the warehouse they read (outside the repository)."""
    url = f"duckdb:///{tmp_path / 'warehouse.duckdb'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE users_sync (customer_id VARCHAR, plan_name VARCHAR, score INTEGER, "
            "updated_at TIMESTAMP)")
        conn.exec_driver_sql(
            f"INSERT INTO users_sync SELECT 'u' || i, 'free', i, TIMESTAMP '{T0}' "
            f"FROM range({USERS}) t(i)")
        conn.exec_driver_sql("CREATE TABLE crm (customer_id VARCHAR, abandoned VARCHAR, "
                             "updated_at TIMESTAMP)")
    engine.dispose()
    repo = tmp_path / "repo"
    folder = repo / "integrations"
    folder.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    users: dict[str, Any] = {
        "kind": "attributes", "warehouse": {"url": url}, "source": {"table": "users_sync"},
        "mapping": {"identifier": {"external_id": "CUSTOMER_ID"},
                    "attributes": {"PLAN_NAME": "account_tier"}},
        "service": {"base_url": service.base_url, "retry_deadline_seconds": 60}}
    write(folder / "users.yaml", users)
    write(folder / "crm.yaml", {**users, "source": {"table": "crm"}, "mapping": {
        "identifier": {"external_id": "CUSTOMER_ID"},
        "attributes": {"ABANDONED": "cart_abandoned"}}})
    (folder / "_notes.yaml").write_text("not: an integration\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    return repo, folder, users


def plan(capsys: pytest.CaptureFixture[str], folder: Path, ref: str, state: StateStore,
         *extra: str) -> tuple[int, str]:
    code = main(["--log-level", "WARNING", "plan", str(folder), "--against", ref,
                 "--state-url", str(state.engine.url), *extra])
    out, err = capsys.readouterr()
    assert os.environ["ENGAGE_API_KEY"] not in out + err
    return code, out


def test_plan_predicts_the_points_of_an_added_mapped_column(
        repo: tuple[Path, Path, dict[str, Any]], service: Service, state: StateStore,
        capsys: pytest.CaptureFixture[str]) -> None:
    root, folder, users = repo
    first = run_direct(folder / "users.yaml", RunOptions(), str(state.engine.url))
    assert first is not None and first["rows_synced"] == USERS
    engine = sa.create_engine(users["warehouse"]["url"])
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO users_sync SELECT 'u' || i, CASE WHEN i < {NEWER // 2} THEN 'gold' "
            f"ELSE 'free' END, i, TIMESTAMP '{T0 + timedelta(hours=1)}' FROM range({NEWER}) t(i)")
    engine.dispose()
    users["mapping"]["attributes"]["SCORE"] = "credit_balance"  # String in the workspace
    write(folder / "users.yaml", users)
    git(root, "commit", "-q", "-am", "users: the score")

    code, out = plan(capsys, folder, "HEAD~1", state, "--json")
    assert code == 0, out
    report = json.loads(out)
    [entry] = report["files"]
    assert entry["file"] == "integrations/users.yaml" and entry["change"] == "changed"
    assert entry["attributes_added"] == ["credit_balance"]
    assert entry["attributes_removed"] == [] and entry["caps_raised"] == []
    assert entry["workspace"] == [
        "credit_balance: defined in the workspace as String, column SCORE is Number"]
    predicted = entry["points"]

    billed_before = int(service.counters()["data_points"])
    with pytest.raises(ConfigError, match="credit_balance"):  # the run's own type check agrees
        run_direct(folder / "users.yaml", RunOptions(), str(state.engine.url))
    assert int(service.counters()["data_points"]) == billed_before
    write(folder / "users.yaml", {**users, "attribute_types": "off"})  # sent as the plan said
    git(root, "commit", "-q", "-am", "users: the workspace's types not checked")
    record = run_direct(folder / "users.yaml", RunOptions(), str(state.engine.url))
    assert record is not None and record["job_status"] == "success"
    billed = int(service.counters()["data_points"]) - billed_before
    assert billed == NEWER + NEWER // 2  # the new attribute for each, the plan for half
    assert abs(predicted - billed) <= 0.01 * billed, (predicted, billed)

    code, out = plan(capsys, folder, "HEAD", state)
    assert (code, out.strip()) == (0, f"no changes: {folder} is as at HEAD")


def test_plan_flags_a_raised_max_deletes(
        repo: tuple[Path, Path, dict[str, Any]], state: StateStore,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, folder, _ = repo
    crm = yaml.safe_load((folder / "crm.yaml").read_text())
    write(folder / "crm.yaml", {**crm, "max_deletes": 5000})
    code, out = plan(capsys, folder, "HEAD", state)  # the working tree against the commit
    assert code == 0, out
    assert "integrations/crm.yaml" in out and "users.yaml" not in out
    assert "! cap raised: max_deletes 1000 -> 5000" in out


def test_plan_exits_1_when_a_run_would_pass_max_deletes(
        repo: tuple[Path, Path, dict[str, Any]], service: Service, state: StateStore,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, folder, users = repo
    engine = sa.create_engine(users["warehouse"]["url"])
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE deletes_sync AS SELECT 'u' || i AS external_id, "
                             f"TIMESTAMP '{T0}' AS updated_at FROM range(12) t(i)")
    engine.dispose()
    write(folder / "deletes.yaml", {
        "kind": "deletes", "warehouse": users["warehouse"], "source": {"table": "deletes_sync"},
        "deletes": {"identifiers": ["external_id"]}, "max_deletes": 10,
        "service": users["service"]})
    code, out = plan(capsys, folder, "HEAD", state)
    assert code == 1, out
    assert "added: integrations/deletes.yaml" in out
    assert "!! cap passed: max_deletes: the run would send 12 deletions, above max_deletes 10" \
        in out
    assert service.requests("/users/delete") == []  # nothing sent
