"""DuckDB's memory in a run: the limit each kind of run opens its warehouse with, and the
memory given back between a run's large statements (`read.duckdb_memory`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import sqlalchemy as sa

from engage_sync.adapters import resources
from engage_sync.config.run_options import RunOptions
from engage_sync.read import duckdb_turns
from engage_sync.read.duckdb_memory import give_back
from engage_sync.read.plan import prepare
from tests.integration.conftest import load, write_integration


def _limit(tmp_path: Path, url_tail: str = "", **extra: Any) -> str:
    path = tmp_path / "warehouse.duckdb"
    if not path.exists():
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE t AS SELECT 'u1' AS user_id, 'free' AS plan")
        con.close()
    integration = load(write_integration(tmp_path, "traits", {
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{path}{url_tail}"},
        "source": {"table": "t"},
        "mapping": {"identifier": {"external_id": "user_id"}, "attributes": {"plan": "plan"}},
        "service": {"base_url": "http://127.0.0.1:9", "api_key_env": "ENGAGE_API_KEY"},
        **extra}))
    engine = resources.warehouse_engine(prepare(integration, RunOptions()))
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar())
    finally:
        duckdb_turns.release(engine)
        engine.dispose()


def test_a_snapshot_run_opens_duckdb_with_a_smaller_limit_than_a_cursor_run(
    tmp_path: Path
) -> None:
    cursor = _limit(tmp_path, cursor_column="plan")
    snapshot = _limit(tmp_path, changes="snapshot")
    assert (cursor, snapshot) == ("122.0 MiB", "91.5 MiB")  # 128MB and 96MB
    assert _limit(tmp_path, "?memory_limit=1GB", changes="snapshot") == "953.6 MiB"


def _anon_mib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("RssAnon:")[1].split()[0]) // 1024


def test_give_back_returns_a_large_statements_memory_and_keeps_the_limit() -> None:
    engine = sa.create_engine("duckdb:///:memory:")
    with engine.connect() as conn:
        conn.exec_driver_sql("SET memory_limit = '256MB'")
        conn.exec_driver_sql(
            "SELECT count(DISTINCT i::VARCHAR || 'x') FROM range(3000000) t(i)").scalar()
        held = _anon_mib()
        give_back(conn)
        assert _anon_mib() < held - 40  # the hash table's memory, kept until then
        limit = conn.exec_driver_sql("SELECT current_setting('memory_limit')").scalar()
        assert limit == "244.0 MiB"
    engine.dispose()


def test_give_back_does_nothing_elsewhere_than_duckdb() -> None:
    engine = sa.create_engine("sqlite://")
    with engine.connect() as conn:
        give_back(conn)
        assert conn.exec_driver_sql("SELECT 1").scalar() == 1


def test_give_back_checkpoints_what_committed_transactions_changed(tmp_path: Path) -> None:
    """DuckDB holds committed changes in memory until a checkpoint writes them to the file (its
    write-ahead log holds them meanwhile): give_back leaves the log empty."""
    path = tmp_path / "w.duckdb"
    engine = sa.create_engine(f"duckdb:///{path}")
    wal = Path(f"{path}.wal")
    with engine.connect() as conn:
        with conn.begin():
            conn.exec_driver_sql("CREATE TABLE t AS SELECT i, 'v' || i AS s FROM range(50000) t(i)")
        assert wal.exists() and wal.stat().st_size > 0
        give_back(conn)
        assert not wal.exists() or wal.stat().st_size == 0
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == 50000
    engine.dispose()
