"""`engage-sync trace FILE --key K`: every traced run that read the row, with the attribute
names sent and left out as unchanged, a reject's reason, and never a value of the row."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.cli.main import main
from engage_sync.state.schema import traces
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, Warehouse, table_integration

SECRET = "val-7f3q-secret"  # a value of the traced row: in no output, log or trace


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["--log-level", "INFO", *argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def _row(user: str, at: Any, plan: str, payload: str | None = None) -> dict[str, Any]:
    body = {"plan": plan, "city": SECRET, "score": 7, "tier": "gold"}
    return {"updated_at": at, "external_id": user, "payload": payload or json.dumps(body)}


def test_trace_lists_each_run_with_the_names_sent(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    rows = [_row("u1", T0, "free"), _row("u2", T0, "free"),
            _row("bad", T0, "free", payload='{"plan": "' + SECRET + '", ')]
    path = table_integration(wh, service, tmp_path, "attributes", rows, trace=True)
    state_url = state.engine.url.render_as_string(hide_password=False)
    run = ["run", str(path), "--no-prefect", "--state-url", state_url]
    said = [_cli(capsys, *run)]  # sent whole
    wh.execute("UPDATE users_sync SET updated_at = :at", at=T0 + timedelta(hours=1))
    said.append(_cli(capsys, *run))  # unchanged
    wh.execute("UPDATE users_sync SET updated_at = :at, payload = :p WHERE external_id = 'u1'",
               at=T0 + timedelta(hours=2), p=_row("u1", T0, "pro")["payload"])
    said.append(_cli(capsys, *run))  # one attribute changed
    wh.engine.dispose()
    assert all(code == 0 for code, _ in said), said

    code, out = _cli(capsys, "trace", str(path), "--key", "u1", "--state-url", state_url,
                     "--json")
    assert code == 0
    runs = json.loads(out)
    assert [len(r["sent"]) for r in runs] == [4, 0, 1]
    assert [r["outcome"] for r in runs] == ["sent", "unchanged", "sent"]
    assert runs[1]["unchanged"] == sorted(runs[1]["unchanged"], key=runs[0]["sent"].index)
    assert runs[2]["sent"] == ["plan"] and len(runs[2]["unchanged"]) == 3
    assert [r["mode"] for r in runs] == ["incremental"] * 3

    code, table = _cli(capsys, "trace", str(path), "--key", "u1", "--state-url", state_url)
    assert code == 0 and len(table.strip().splitlines()) == 4  # a heading and three runs

    code, bad = _cli(capsys, "trace", str(path), "--key", "bad", "--state-url", state_url)
    assert code == 0 and "rejected" in bad and "JSON" in bad.upper()

    for text in (out, table, bad, caplog.text, *(s for _, s in said)):
        assert SECRET not in text
    with state.engine.connect() as conn:
        kept = conn.execute(sa.select(traces)).all()
    assert kept and all(SECRET not in str(tuple(r)) for r in kept)


def test_trace_of_a_row_in_doubt_names_its_request_and_reason(
    service: Service, state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    wh = Warehouse("duckdb", url, sa.create_engine(url))
    path = table_integration(wh, service, tmp_path, "attributes", [_row("u1", T0, "free")],
                             trace=True, service={"retry_deadline_seconds": 1})
    wh.engine.dispose()
    service.faults([{"path": "/users/track", "action": "500"}])
    state_url = state.engine.url.render_as_string(hide_password=False)
    _cli(capsys, "run", str(path), "--no-prefect", "--state-url", state_url)
    service.faults([])
    code, out = _cli(capsys, "trace", str(path), "--key", "u1", "--state-url", state_url,
                     "--json")
    assert code == 0
    (run,) = json.loads(out)
    assert run["outcome"] == "in_doubt" and run["request"] == 1, run
    assert "500" in run["reason"] and SECRET not in out
