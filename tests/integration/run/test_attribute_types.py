"""The workspace's types, checked before the first request: a sent attribute whose source type
cannot be its `data_type` in GET /custom_attributes, or a blocklisted one, stops the run with
0 requests naming the attribute, the column and both types; a 403 warns once and goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.cli.main import main
from engage_sync.deliver.key_check import CHECK_PATH
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, Warehouse, integration_body, write_integration


def _mapped(service: Service, tmp_path: Path, attributes: dict[str, str],
            **extra: Any) -> Path:
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    wh.create("customers", [("UPDATED_AT", sa.DateTime()), ("CUSTOMER_ID", sa.String()),
                            ("REGION_TEXT", sa.String()), ("SCORE", sa.Integer())])
    wh.insert("customers", [{"UPDATED_AT": T0, "CUSTOMER_ID": f"c{i}", "REGION_TEXT": "north",
                             "SCORE": i} for i in range(3)])
    wh.engine.dispose()
    body = integration_body(wh, service, "attributes", "customers", mapping={
        "identifier": {"external_id": "CUSTOMER_ID"}, "attributes": attributes}, **extra)
    return write_integration(tmp_path, "customers", body)


def _run(path: Path, state: StateStore, capsys: pytest.CaptureFixture[str]
         ) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["--log-level", "WARNING", "run", str(path), "--no-prefect", "--state-url",
                 state.engine.url.render_as_string(hide_password=False)])
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines()
                  if line.startswith("engage-sync:") or "(403)" in line]


@pytest.mark.parametrize("attributes, named, pages", [
    ({"REGION_TEXT": "region"}, ("'region'", "Number", "REGION_TEXT", "VARCHAR"), 1),
    ({"SCORE": "employer"}, ("'employer'", "blocklisted", "SCORE", "INTEGER"), 1),
    ({"SCORE": "zodiac_sign"}, ("'zodiac_sign'", "String", "SCORE", "INTEGER"), 2),
])
def test_a_type_the_workspace_does_not_take_stops_the_run(
    attributes: dict[str, str], named: tuple[str, ...], pages: int, service: Service,
    state: StateStore,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = _mapped(service, tmp_path, {**attributes, "SCORE" if "SCORE" not in attributes
                                       else "REGION_TEXT": "plan_name"})
    code, lines = _run(path, state, capsys)
    assert code != 0 and len(lines) == 1, lines
    assert all(n in lines[0] for n in named), lines[0]
    assert service.requests("/users/track") == []
    # the key check's answer reused; a second page only for a name that sorts after it
    assert len(service.requests(CHECK_PATH)) == pages
    (record,) = state.runs_newest_first("customers", 0, 10)
    assert record["job_status"] == "config_error"


def test_types_that_fit_and_the_check_switched_off_send(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = _mapped(service, tmp_path, {"SCORE": "loyalty_points", "REGION_TEXT": "plan_name"})
    assert _run(path, state, capsys)[0] == 0
    assert service.requests("/users/track")
    path = _mapped(service, tmp_path, {"REGION_TEXT": "region"}, attribute_types="off")
    assert _run(path, state, capsys)[0] == 0


def test_text_typed_a_number_stops_the_run_and_unchecked_the_sandbox_drops_it(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The sandbox's definitions type `region` as a Number: the check names both and sends
    nothing; switched off, the values are sent and dropped as the service drops them."""
    attributes = {"REGION_TEXT": "region", "SCORE": "loyalty_points"}
    code, lines = _run(_mapped(service, tmp_path, attributes), state, capsys)
    assert code != 0 and all(n in lines[0] for n in ("'region'", "Number", "REGION_TEXT"))
    assert service.requests("/users/track") == []
    path = _mapped(service, tmp_path, attributes, attribute_types="off")
    assert _run(path, state, capsys)[0] == 0
    assert service.requests("/users/track")
    for i in range(3):
        profile = service.profile(f"c{i}")
        assert profile is not None and profile["attributes"] == {"loyalty_points": i}


def test_a_payload_key_of_the_wrong_type_stops_the_run(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    wh.create("users_sync", [("updated_at", sa.DateTime()), ("external_id", sa.String()),
                             ("payload", sa.Text())])
    wh.insert("users_sync", [{"updated_at": T0, "external_id": "u1",
                              "payload": json.dumps({"region": "north", "plan": "x"})}])
    wh.engine.dispose()
    path = write_integration(tmp_path, "users", integration_body(
        wh, service, "attributes", "users_sync"))
    code, lines = _run(path, state, capsys)
    assert code != 0 and "'region'" in lines[0] and "payload.region" in lines[0], lines
    assert service.requests("/users/track") == []


def test_a_key_without_the_read_permission_warns_once_and_runs(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGAGE_API_KEY", "sandbox-track-only-key")
    path = _mapped(service, tmp_path, {"REGION_TEXT": "region"})
    code, lines = _run(path, state, capsys)
    assert code == 0, lines
    assert len(lines) == 1 and "types were not checked" in lines[0], lines
    assert service.requests("/users/track")


def test_an_array_longer_than_array_length_stops_the_run(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """`pets` is an Array of at most 25 items in the sandbox's definitions."""
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    wh.execute("CREATE TABLE pets_sync (UPDATED_AT TIMESTAMP, CUSTOMER_ID VARCHAR, "
               "PETS VARCHAR[])")
    wh.execute("INSERT INTO pets_sync SELECT TIMESTAMP '2026-01-01', 'c' || i, "
               "list_transform(range(CASE WHEN i = 2 THEN 30 ELSE 3 END), lambda x: 'p' || x) "
               "FROM range(3) t(i)")
    wh.engine.dispose()
    path = write_integration(tmp_path, "pets", integration_body(
        wh, service, "attributes", "pets_sync", mapping={
            "identifier": {"external_id": "CUSTOMER_ID"}, "attributes": {"PETS": "pets"}}))
    code, lines = _run(path, state, capsys)
    assert code != 0 and len(lines) == 1, lines
    assert all(n in lines[0] for n in ("'pets'", "25", "PETS", "30")), lines[0]
    assert service.requests("/users/track") == []
