"""Progress lines of a real run (--no-prefect path): the window's total is counted, and the
last line agrees with the status record."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from engage_sync.adapters.wiring import run_direct
from engage_sync.config.run_options import RunOptions
from tests.integration.conftest import (
    Service,
    Warehouse,
    integration_body,
    user_rows,
    users_table,
    write_integration,
)


def test_progress_shows_the_counted_total_and_ends_with_the_record(
    warehouse: Warehouse, service: Service, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users_table(warehouse)
    rows = [*user_rows(500, step=timedelta(seconds=1)),
            {"updated_at": user_rows(1)[0]["updated_at"], "external_id": "bad",
             "payload": "{"}]
    warehouse.insert("users_sync", rows)
    path = write_integration(tmp_path, "users", integration_body(
        warehouse, service, "attributes", "users_sync"))
    with caplog.at_level(logging.INFO, logger="engage_sync.progress"):
        record = run_direct(path, RunOptions(), state_url=f"sqlite:///{tmp_path / 's.db'}")
    assert record is not None
    lines = [r.getMessage() for r in caplog.records if r.name == "engage_sync.progress"]
    assert record["rows_read"] == 501
    assert lines[0].startswith("progress: read 0 of 501 rows (counted, 0%)")
    assert lines[-1].startswith(
        "progress: partial: read 501 of 501 rows (counted, 100%), synced 500, failed 1, "
        "rejected 1, in doubt 0, unchanged 0;")
