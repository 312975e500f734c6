"""The state database's folder is created for any SQLite file URL, absolute or relative; its
connections' settings."""

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


def test_a_sqlite_state_connection_waits_for_locks_in_wal_and_zeroes_deletes_only_for_free(
    tmp_path: Path,
) -> None:
    """secure_delete FAST (2), whatever the build's default: Debian's turns it on, which wrote
    every page a compaction freed (`field_store_sql.SECURE_DELETE`)."""
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    with store.engine.connect() as conn:
        settings = [conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in (
            "journal_mode", "busy_timeout", "synchronous", "secure_delete")]
    store.engine.dispose()
    assert settings == ["wal", 30_000, 1, 2]  # synchronous NORMAL is 1


def test_a_new_sqlite_state_file_takes_larger_pages_and_an_old_one_keeps_its_own(
    tmp_path: Path,
) -> None:
    """A state file this release creates has `PAGE_SIZE` pages (a first run's field record
    is written in a quarter of the pages); a file made with SQLite's default keeps 4,096
    (WAL mode allows no change) and opens and migrates as before."""
    import sqlite3

    from engage_sync.state.schema import PAGE_SIZE

    def page_size(path: Path) -> int:
        db = sqlite3.connect(path)
        try:
            return int(db.execute("PRAGMA page_size").fetchone()[0])
        finally:
            db.close()

    new = open_state(f"sqlite:///{tmp_path / 'new.db'}")
    new.engine.dispose()
    old_file = tmp_path / "old.db"
    db = sqlite3.connect(old_file)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE kept (a)")
    db.close()
    old = open_state(f"sqlite:///{old_file}")
    assert old.count_runs("users") == 0  # the schema was made in it
    old.engine.dispose()
    assert PAGE_SIZE == 16_384 and page_size(tmp_path / "new.db") == PAGE_SIZE
    assert page_size(old_file) == 4_096
