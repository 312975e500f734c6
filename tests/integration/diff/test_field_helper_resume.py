"""A first diffed run resumed after a kill starts its field helper as a fresh first run does
(`Differ.open`): the killed attempt's log is forgotten (its helper's users already have no
record), so the resumed run opens on an empty record, looks nothing up and hands what the
service acknowledges to a helper; profiles and the record end right."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.diff.stage import Differ
from engage_sync.items import Item
from engage_sync.state.field_codec import user_key
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    field_records,
    killed_after_the_helper_took_over,
    logged_deltas,
    resume_cli,
    user_rows,
)

INTEGRATION = "users"
STARTED = "a helper process records the fields of this first diffed run"


def _item(n: int) -> Item:
    blob = json.dumps({"external_id": f"u{n}", "plan": "free", "n": n}).encode()
    return Item(n, f"u{n}", f"external_id:u{n}", "attributes", blob, (), 2)


class _Helper:
    """Stands in for `FieldHelper`: counts its starts, takes what it is handed."""

    handed = 0
    takes_log = False

    def hand(self, users: list[str], blobs: list[bytes]) -> None:
        self.handed += len(users)

    def stop(self) -> None:
        pass


def test_a_resumed_first_run_opens_on_an_empty_record_and_starts_its_helper(
    state_both: StateStore
) -> None:
    """The killed attempt logged u0 (digested before its helper started) and folded nothing:
    the resumed attempt's Differ forgets that log, sends whole and starts its helper."""
    killed: list[Any] = [_item(0)]
    first = Differ(INTEGRATION, state_both, start_helper=lambda: None, helper_after=5)
    first.open()
    first.apply(killed)
    state_both.settle("r1", INTEGRATION, [], acked_fields=[(killed[0].user, killed[0].fields)])
    assert logged_deltas(state_both, INTEGRATION) == 1  # then the kill: no `close`
    started: list[_Helper] = []

    def start() -> Any:
        started.append(_Helper())
        return started[-1]

    resumed = Differ(INTEGRATION, state_both, start_helper=start, helper_after=1)
    resumed.open()
    assert resumed.blank and logged_deltas(state_both, INTEGRATION) == 0
    assert field_records(state_both, INTEGRATION) == {}
    resumed.apply([_item(1)])
    resumed.apply([_item(2)])
    assert len(started) == 1 and resumed.helper is started[0]


def test_a_resumed_first_run_with_a_record_before_it_looks_users_up(
    state_both: StateStore
) -> None:
    """Not a first run (a folded record from an earlier run): its open folds the log and
    forgets nothing, and it starts no helper."""
    done: list[Any] = [_item(0)]
    earlier = Differ(INTEGRATION, state_both)
    earlier.open()
    earlier.apply(done)
    state_both.settle("r0", INTEGRATION, [], acked_fields=[(done[0].user, done[0].fields)])
    earlier.close()  # a finished run: its record is folded
    later: list[Any] = [_item(1)]
    resumed = Differ(INTEGRATION, state_both, start_helper=lambda: pytest.fail("a helper"),
                     helper_after=0)
    resumed.open()
    resumed.apply(later)
    assert not resumed.blank and user_key(done[0].user) in field_records(state_both,
                                                                           INTEGRATION)


def test_a_first_run_killed_after_its_helper_took_over_resumes_with_a_helper(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed at its 40th request, after its first settle (32 requests) logged what it
    digested before its helper started (after 100 items); resumed in this process: it starts
    a helper too, and every user ends recorded at what the service holds; a later row back
    at an older value is sent."""
    path, state_url = killed_after_the_helper_took_over(
        warehouse, service, sandbox_key, tmp_path, monkeypatch)
    state = StateStore.from_url(state_url)
    with caplog.at_level(logging.INFO, logger="engage_sync.diff.stage"):
        record = sync_file(path, store=state).record
    assert record is not None and record["job_status"] == "success"
    assert [r.getMessage() for r in caplog.records
            if STARTED in r.getMessage()] == [f"integration users: {STARTED}"]
    recorded = field_records(state, "users")
    assert user_key("external_id:v02999") in recorded  # the resumed run's helper wrote it
    state.engine.dispose()
    assert service.profile("u00000")["attributes"]["plan"] == "new"  # type: ignore[index]
    warehouse.insert("users_sync", user_rows(1, at=T0 + timedelta(hours=1), plan="old"))
    warehouse.engine.dispose()
    assert resume_cli(path, state_url, sandbox_key)["rows_synced"] == 1
    assert service.profile("u00000")["attributes"]["plan"] == "old"  # type: ignore[index]
