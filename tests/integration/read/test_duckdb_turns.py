"""Partitions in threads open and close one DuckDB file side by side: without turns, an open
racing the close of another engine's last connection fails ("Unique file handle conflict";
56 of 800 opens failed in a run of this test without them). Another process holding the file
is waited for, up to `warehouse.lock_wait_seconds` (scheduled runs of one file's integrations
start together: before the wait, all but one failed)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import duckdb
import pytest
import sqlalchemy as sa

from engage_sync.adapters import resources
from engage_sync.adapters.resources import writeback_engine
from engage_sync.config.integration import Integration
from engage_sync.config.run_options import RunOptions
from engage_sync.errors import SourceError
from engage_sync.read import duckdb_turns
from engage_sync.read.extract import connected
from engage_sync.read.plan import prepare
from tests.integration.conftest import load, write_integration


def opened(integration: Integration) -> sa.Engine:
    """The warehouse's engine as a run opens it (from its plan)."""
    return resources.warehouse_engine(prepare(integration, RunOptions()))


def test_engines_of_one_file_open_and_close_side_by_side(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    integration = users(tmp_path, path)
    errors: list[str] = []

    def opens() -> None:
        for _ in range(200):
            engine = opened(integration)
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT x FROM t").all()
            except Exception as exc:
                errors.append(str(exc)[:200])
            finally:
                duckdb_turns.release(engine)

    threads = [threading.Thread(target=opens) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def users(tmp_path: Path, path: Path, **warehouse: float) -> Integration:
    return load(write_integration(tmp_path, "users", {
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{path}", **warehouse},
        "writeback": {},
        "source": {"table": "t"}, "payload": {"identifier": "external_id"},
        "service": {"base_url": "http://127.0.0.1:9", "api_key_env": "ENGAGE_API_KEY"}}))


def holder(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process with the file open for writing for `seconds`, once it says so."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time\n"
         f"con = duckdb.connect({str(path)!r})\nprint('held', flush=True)\n"
         f"time.sleep({seconds})\ncon.close()"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def table_file(tmp_path: Path) -> Path:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    return path


@pytest.mark.parametrize("opened_by", ["the run", "the write-back"])
def test_another_process_holding_the_file_is_waited_for(tmp_path: Path, opened_by: str) -> None:
    path = table_file(tmp_path)
    integration = users(tmp_path, path, lock_wait_seconds=60)
    proc = holder(path, 1.5)
    with ExitStack() as held:
        held.callback(proc.wait, 30)
        if opened_by == "the run":
            engine = opened(integration)
            held.callback(duckdb_turns.release, engine)
        else:
            engine = held.enter_context(writeback_engine(integration))
        with engine.connect() as conn:
            assert proc.poll() is not None  # opened only once the other process let go
            assert conn.exec_driver_sql("SELECT x FROM t").scalar() == 1


def test_a_lock_held_past_the_wait_is_a_source_error_naming_the_key(tmp_path: Path) -> None:
    path = table_file(tmp_path)
    integration = users(tmp_path, path, lock_wait_seconds=0.5)
    proc = holder(path, 60)
    engine = opened(integration)
    try:
        started = time.monotonic()
        with pytest.raises(SourceError) as raised, connected(
                engine, prepare(integration, RunOptions()).spec):
            pass
        assert time.monotonic() - started >= 0.5
        said = str(raised.value)
        assert "integration users: cannot connect to the warehouse: after waiting 0.5 s" in said
        assert "warehouse.lock_wait_seconds" in said
    finally:
        duckdb_turns.release(engine)
        proc.kill()
        proc.wait(30)


def test_a_wait_for_one_file_holds_up_no_open_of_another(tmp_path: Path) -> None:
    held_path, free_path = table_file(tmp_path / "held"), table_file(tmp_path / "free")
    waiting = opened(users(tmp_path / "held", held_path, lock_wait_seconds=60))
    free = opened(users(tmp_path / "free", free_path))
    proc = holder(held_path, 120)
    outcome: list[object] = []

    def wait_for_held() -> None:
        with waiting.connect() as conn:
            outcome.append(conn.exec_driver_sql("SELECT x FROM t").scalar())

    thread = threading.Thread(target=wait_for_held)
    try:
        thread.start()
        time.sleep(0.5)  # the thread is waiting for the other process's lock by now
        with free.connect() as conn:  # opened while the other engine waits
            assert conn.exec_driver_sql("SELECT x FROM t").scalar() == 1
        assert thread.is_alive() and proc.poll() is None and outcome == []
    finally:
        proc.kill()
        proc.wait(30)
        thread.join(60)
        duckdb_turns.release(waiting)
        duckdb_turns.release(free)
    assert outcome == [1]  # and it got the file once the other process let go


def _threads_set_then_read(integration: Integration) -> str:
    """One engine sets the database's (global) thread count and is disposed; a second engine
    of the file reads it: the setting survives only if the database stayed loaded."""
    first = opened(integration)
    with first.connect() as conn:
        conn.exec_driver_sql("SET GLOBAL threads = 7")
    duckdb_turns.release(first)
    second = opened(integration)
    try:
        with second.connect() as conn:
            return str(conn.exec_driver_sql("SELECT current_setting('threads')").scalar())
    finally:
        duckdb_turns.release(second)


def test_a_folders_scope_keeps_the_file_loaded_and_lets_go_at_its_end(tmp_path: Path) -> None:
    path = table_file(tmp_path)
    integration = users(tmp_path, path)
    assert _threads_set_then_read(integration) != "7"  # reopened: loaded again
    with duckdb_turns.kept_open(), duckdb_turns.kept_open():  # nested: the outer one closes
        assert _threads_set_then_read(integration) == "7"
    # the scope's end closed what it held: another process may open the file for writing
    holder(path, 0).wait(30)


def _opens_elsewhere(path: Path) -> bool:
    """Whether another process can open the file for writing now."""
    return subprocess.run([sys.executable, "-c", f"import duckdb; duckdb.connect({str(path)!r})"],
                          capture_output=True, timeout=60).returncode == 0


def test_a_folders_scope_lets_go_while_partitions_in_other_processes_read(
        tmp_path: Path) -> None:
    path = table_file(tmp_path)
    integration = users(tmp_path, path)
    with duckdb_turns.kept_open():
        duckdb_turns.release(opened_and_used(integration))
        assert not _opens_elsewhere(path)  # held for the folder's next runs
        duckdb_turns.let_go()  # as the coordinator does before partitions in processes
        assert _opens_elsewhere(path)
        duckdb_turns.release(opened_and_used(integration))
        assert not _opens_elsewhere(path)  # the next connect keeps it again


def opened_and_used(integration: Integration) -> sa.Engine:
    engine = opened(integration)
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT x FROM t").all()
    return engine
