"""The state database's folder is created for any SQLite file URL, absolute or relative."""

from __future__ import annotations

from pathlib import Path

import pytest

from engage_sync.adapters.wiring import open_state


def test_an_absolute_sqlite_url_gets_its_folder(tmp_path: Path) -> None:
    db = tmp_path / "not" / "yet" / "state.db"
    open_state(f"sqlite:///{db}")
    assert db.exists()


def test_a_relative_sqlite_url_gets_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    open_state("sqlite:///.engage-sync/state.db")
    assert (tmp_path / ".engage-sync" / "state.db").exists()
