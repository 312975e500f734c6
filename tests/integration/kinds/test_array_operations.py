"""One malformed array operation among 75 good rows costs its own row only."""

from __future__ import annotations

import json
from pathlib import Path

from engage_sync.adapters.wiring import sync_file
from engage_sync.state.store import StateStore
from engage_sync.status.record import run_errors
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    integration_body,
    users_table,
    write_integration,
)

BAD = 40


def test_one_bad_array_operation_is_rejected_and_the_74_others_synced(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    users_table(warehouse)
    warehouse.insert("users_sync", [
        {"updated_at": T0, "external_id": f"u{n:02d}",
         "payload": json.dumps({"tags": {"add": 5} if n == BAD else {"add": ["vip"]}})}
        for n in range(75)])
    path = write_integration(tmp_path, "users", integration_body(
        warehouse, service, "attributes", "users_sync"))
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["rows_read"], record["rows_synced"], record["rows_rejected"],
            record["rows_in_doubt"]) == (75, 74, 1, 0), record
    assert run_errors(state, record["run_id"]) == [{
        "kind": "rejected", "row_key": f"u{BAD}",
        "reason": "attribute 'tags': 'add' must be an array of strings"}]
    sent = service.requests()
    assert [r["status"] for r in sent] == [201]
    assert len(sent[0]["body"]["attributes"]) == 74
    tags = {p["external_id"]: p["attributes"].get("tags") for p in service.profiles()}
    assert tags == {f"u{n:02d}": ["vip"] for n in range(75) if n != BAD}
