"""Partitions in threads open and close one DuckDB file side by side: without turns, an open
racing the close of another engine's last connection fails ("Unique file handle conflict";
56 of 800 opens failed in a run of this test without them)."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb

from engage_sync.adapters.wiring import warehouse_engine
from engage_sync.read import duckdb_turns
from tests.integration.conftest import load, write_integration


def test_engines_of_one_file_open_and_close_side_by_side(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    integration = load(write_integration(tmp_path, "users", {
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{path}"},
        "source": {"table": "t"}, "payload": {"identifier": "external_id"},
        "service": {"base_url": "http://127.0.0.1:9", "api_key_env": "ENGAGE_API_KEY"}}))
    errors: list[str] = []

    def opens() -> None:
        for _ in range(200):
            engine = warehouse_engine(integration)
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
