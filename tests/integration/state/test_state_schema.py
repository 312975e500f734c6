"""The state schema is created and upgraded safely: ten processes opening an empty database at
once all succeed (PostgreSQL and SQLite), a database made by an earlier release is upgraded in
place with its records intact, and one made by a later release is refused untouched."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.state.migrations import SCHEMA_VERSION, StateSchemaError, version_of, versions
from engage_sync.state.schema import ADDED_COLUMNS, cursors, metadata, runs
from engage_sync.state.store import StateStore

OPEN = ("import sys, time\n"
        "from engage_sync.state.store import StateStore\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "StateStore.from_url(sys.argv[1]).engine.dispose()\n")


@pytest.fixture
def empty_postgres(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the test server (dropped afterwards)."""
    name = f"fresh_{time.monotonic_ns() % 10**9}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
    admin.dispose()


def _open_together(url: str, n: int = 10) -> list[subprocess.CompletedProcess[str]]:
    """`n` processes that open a StateStore on `url` at the same instant."""
    start = time.time() + 3  # all imported and waiting by then
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, url, str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=120), *p.communicate())
            for p in procs]


@pytest.mark.parametrize("where", ["postgres", "sqlite"])
def test_ten_processes_open_an_empty_state_database_at_once(
        where: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = (request.getfixturevalue("empty_postgres") if where == "postgres"
           else f"sqlite:///{tmp_path / 'state.db'}")
    done = _open_together(url)
    assert [p.returncode for p in done] == [0] * 10, "\n".join(p.stderr[-2000:] for p in done)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert version_of(conn) == SCHEMA_VERSION
        assert conn.scalar(sa.select(sa.func.count()).select_from(versions)) == 1
    engine.dispose()


def _old_release(engine: sa.Engine) -> None:
    """A state database as the first release made it: no version, runs without the columns
    added since, no field record; one cursor and one finished run recorded."""
    old = sa.MetaData()
    for table in metadata.sorted_tables:
        if table.name.startswith("engage_field"):
            continue
        skip = ADDED_COLUMNS if table is runs else ()
        sa.Table(table.name, old, *(sa.Column(c.name, c.type, primary_key=c.primary_key)
                                    for c in table.columns if c.name not in skip))
    old.create_all(engine)
    with engine.begin() as conn:
        conn.execute(old.tables[cursors.name].insert().values(
            integration="users", cursor='["2026-01-01T00:00:00+00:00", "u9"]',
            updated_at=sa.func.now()))
        conn.execute(old.tables[runs.name].insert().values(
            run_id="r1", integration="users", seq=1, mode="incremental", job_status="success",
            sync_start_time=sa.func.now(), rows_synced=7, rows_failed_with_errors=1,
            rows_rejected=2, rows_in_doubt=0, requests_sent=3))


@pytest.mark.parametrize("where", ["postgres", "sqlite"])
def test_a_database_of_an_earlier_release_is_upgraded_in_place(
        where: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = (request.getfixturevalue("empty_postgres") if where == "postgres"
           else f"sqlite:///{tmp_path / 'state.db'}")
    _old_release(sa.create_engine(url))
    done = _open_together(url, n=4)  # several processes upgrade it at once, too
    assert [p.returncode for p in done] == [0] * 4, "\n".join(p.stderr[-2000:] for p in done)
    store = StateStore.from_url(url)
    run = store.run("r1")
    assert (run["rows_synced"], run["rows_rejected"], run["requests_sent"]) == (7, 2, 3)
    assert run["rows_unchanged"] == 0 and run["data_points_sent"] == 0  # added, defaulted
    assert store.cursor("users") is not None
    assert not store.has_field_record("users")  # the field record's tables were created
    with store.engine.connect() as conn:
        assert version_of(conn) == SCHEMA_VERSION
    store.engine.dispose()


def test_a_database_of_a_later_release_is_refused_untouched(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    StateStore.from_url(url).engine.dispose()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(versions.update().values(version=SCHEMA_VERSION + 1))
        conn.exec_driver_sql("CREATE TABLE engage_later (x INTEGER)")
    with pytest.raises(StateSchemaError, match=rf"schema version {SCHEMA_VERSION + 1}, newer "):
        StateStore.from_url(url)
    with engine.connect() as conn:
        assert version_of(conn) == SCHEMA_VERSION + 1
        assert sa.inspect(conn).has_table("engage_later")
    engine.dispose()
