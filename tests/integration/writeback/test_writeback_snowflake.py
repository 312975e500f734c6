"""The write-back on Snowflake, live through its real connector against the
emulator (`test_snowflake_live.py`): the schema and tables created (DDL apart from the run's
one transaction, since Snowflake's DDL commits), the record and the rejected row written,
joined to the source by key, with no payload value."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service
from tests.integration.test_snowflake_live import TABLE, _file, _rows
from tests.snowflake_emulator import PASSWORD, Emulator

MARK = "pv7q"  # the plan of every row: a payload value


def test_the_write_back_on_snowflake(snowflake: Emulator, service: Service, state: StateStore,
                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNOWFLAKE_PASSWORD", PASSWORD)
    snowflake.execute(TABLE, _rows("2026-01-01 00:00:00", 0, 20, MARK),
                      "INSERT INTO USERS_SYNC SELECT '2026-01-01 00:00:00'::TIMESTAMP_NTZ, "
                      f"'bad1', PARSE_JSON('[\"{MARK}\"]')")  # not an object: rejected
    path = _file(tmp_path, "users_wb", snowflake, service, writeback={"schema": "ENGAGE_WB"})
    result = sync_file(path, store=state)
    record = result.record
    assert record is not None and result.writeback_error is None
    assert (record["rows_synced"], record["rows_rejected"]) == (20, 1)
    with snowflake.engine().connect() as conn:
        runs = conn.execute(sa.text("SELECT * FROM ENGAGE_WB.ENGAGE_SYNC_RUNS")).mappings().all()
        joined = conn.execute(sa.text(
            "SELECT o.OUTCOME, s.EXTERNAL_ID FROM ENGAGE_WB.ENGAGE_SYNC_ROW_OUTCOMES o "
            "JOIN USERS_SYNC s ON s.EXTERNAL_ID = o.EXTERNAL_ID")).all()
        values = [str(v) for table in ("ENGAGE_SYNC_RUNS", "ENGAGE_SYNC_ROW_OUTCOMES")
                  for row in conn.execute(sa.text(f"SELECT * FROM ENGAGE_WB.{table}"))
                  for v in row]
    assert [(r["run_id"], r["rows_rejected"], r["rows_synced"]) for r in runs] == [
        (record["run_id"], 1, 20)]
    assert joined == [("rejected", "bad1")]
    assert values and not [v for v in values if MARK in v]
