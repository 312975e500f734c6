"""The status server's trace (`GET /integrations/{id}/trace?key=K`), over HTTP on loopback:
behind the server's token, the same runs `engage-sync trace --json` lists, never a value."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.adapters.status_server import create_app
from engage_sync.cli.main import main
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, Warehouse, served, table_integration
from tests.integration.test_trace import SECRET, _row

TOKEN = "trace-token-0123456789abcdef"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(["--log-level", "WARNING", *argv]) == 0
    return capsys.readouterr().out


def test_the_served_trace_is_the_cli_trace_behind_the_token(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    rows = [_row("u1", T0, "free"), _row("bad", T0, "free", payload='{"plan": "' + SECRET)]
    path = table_integration(wh, service, tmp_path, "attributes", rows, trace=True)
    state_url = state.engine.url.render_as_string(hide_password=False)
    _cli(capsys, "run", str(path), "--no-prefect", "--state-url", state_url)
    wh.execute("UPDATE users_sync SET updated_at = :at, payload = :p WHERE external_id = 'u1'",
               at=T0 + timedelta(hours=1), p=_row("u1", T0, "pro")["payload"])
    wh.engine.dispose()
    _cli(capsys, "run", str(path), "--no-prefect", "--state-url", state_url)
    printed = {key: json.loads(_cli(capsys, "trace", str(path), "--key", key, "--state-url",
                                    state_url, "--json")) for key in ("u1", "bad")}

    with served(create_app(state, TOKEN, tmp_path), TOKEN) as client:
        answers = {key: client.get("/integrations/users/trace", params={"key": key})
                   for key in ("u1", "bad")}
        unknown = client.get("/integrations/nobody/trace", params={"key": "u1"})
        no_key = client.get("/integrations/users/trace")
        client.headers.pop("Authorization")
        refused = [client.get("/integrations/users/trace", params={"key": "u1"},
                              headers=headers)
                   for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                                   {"Authorization": f"Bearer {TOKEN}x"})]

    assert [r.status_code for r in answers.values()] == [200, 200]
    runs = answers["u1"].json()
    assert [len(r["sent"]) for r in runs] == [4, 1] and runs[1]["sent"] == ["plan"]
    assert {key: r.json() for key, r in answers.items()} == printed
    (rejected,) = answers["bad"].json()
    assert rejected["outcome"] == "rejected" and "JSON" in rejected["reason"].upper()
    assert all(SECRET not in r.text for r in answers.values())
    assert unknown.status_code == 400 and no_key.status_code == 400
    for r in refused:
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "outcome" not in r.text and "plan" not in r.text
