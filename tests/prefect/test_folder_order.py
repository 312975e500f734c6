"""`sync_folder`: one shared set of rate budgets per flow run (its order: tests/unit); old row
errors pruned once a folder, not once an integration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters import flows
from engage_sync.adapters.wiring import RunResult
from engage_sync.run.dry_run import DryRun
from engage_sync.state import retention

KINDS = {"a_deletes": "deletes", "b_events": "events", "c_attributes": "attributes"}


def test_a_folder_flow_run_shares_one_rate_budget_set_and_definitions(
    prefect_api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("b_events", "a_deletes", "c_attributes"):
        (tmp_path / f"{name}.yaml").write_text(f"kind: {KINDS[name]}\n")
    calls: list[tuple[str, Any]] = []
    shared: list[Any] = []  # the workspace's definitions, read once for the folder

    def fake_sync_file(path: Path, **kw: Any) -> RunResult:
        calls.append((Path(path).stem, kw["budgets"]))
        shared.append(kw["definitions"])
        return RunResult(Path(path).stem, dry_run=DryRun(rows=1))

    monkeypatch.setattr(flows, "sync_file", fake_sync_file)
    result = flows.sync_folder(str(tmp_path), dry_run=True,
                               state_url=f"sqlite:///{tmp_path / 'state.db'}")
    assert [name for name, _ in calls] == ["c_attributes", "b_events", "a_deletes"]
    assert len({id(b) for _, b in calls}) == 1 and calls[0][1] is not None
    assert len({id(d) for d in shared}) == 1 and shared[0] is not None
    assert set(result) == {"c_attributes", "b_events", "a_deletes"}


def test_a_folder_flow_run_prunes_old_row_errors_once(
    prefect_api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in KINDS:
        (tmp_path / f"{name}.yaml").write_text(f"kind: {KINDS[name]}\n")
    prunes: list[Any] = []
    monkeypatch.setattr(flows, "sync_file", lambda path, **kw: RunResult(
        Path(path).stem, record={"job_status": "success", "rows_synced": 1}))
    monkeypatch.setattr(retention, "prune", lambda store: prunes.append(store) or 0)
    result = flows.sync_folder(str(tmp_path), state_url=f"sqlite:///{tmp_path / 'state.db'}")
    assert set(result) == set(KINDS)
    assert len(prunes) == 1  # each integration's artifacts left, the errors pruned once
