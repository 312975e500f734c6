"""Alerts end to end against the sandbox and a loopback webhook: a drop in volume raised once
and cleared once, a failed run, a sync that stopped running (freshness, seen by the status
server's watch too), each delivered once with figures and never a row's value; the webhook's
URL never logged nor kept; a failing webhook never fails a run; bad config names its key."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from engage_sync.adapters.alert_check import after_run, check_freshness
from engage_sync.adapters.freshness_watch import FreshnessWatch
from engage_sync.adapters.status_server import create_app
from engage_sync.adapters.wiring import sync_file
from engage_sync.config.files import load_integration
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore
from tests.integration.alert_receiver import (
    NORMAL,
    TOKEN,
    Receiver,
    play,
    receiver,
    rows,
)
from tests.integration.conftest import (
    Service,
    Warehouse,
    integration_body,
    served,
    users_table,
    write_integration,
)

HOOK = "ALERTS_WEBHOOK_URL"


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Any:
    with receiver() as (got, url):
        monkeypatch.setenv(HOOK, url)
        monkeypatch.setenv("ENGAGE_SYNC_STATUS_URL", "http://status.example:8788")
        yield got


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    url = f"duckdb:///{tmp_path / 'wh.duckdb'}"
    warehouse = Warehouse("duckdb", url, sa.create_engine(url))
    users_table(warehouse)
    return warehouse


def _file(wh: Warehouse, service: Service, folder: Path, **alerts: Any) -> Path:
    body = integration_body(wh, service, "attributes", "users_sync",
                            alerts={"webhook_url": f"${{{HOOK}}}", **alerts})
    return write_integration(folder, "users", body)


def _no_secret_anywhere(got: Receiver, state: StateStore, said: str) -> None:
    """No body holds a seeded value; neither the log nor the state database the hook's URL."""
    for body in got.bodies:
        assert TOKEN not in yaml.safe_dump(body)
    assert got.path not in said
    with state.engine.connect() as conn:
        for table in ("engage_alerts", "engage_runs"):
            for row in conn.execute(sa.text(f"SELECT * FROM {table}")):
                assert got.path not in str(tuple(row))


def test_volume_and_failed_alerts_are_raised_once_and_cleared_once(
    service: Service, state: StateStore, wh: Warehouse, hook: Receiver, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = _file(wh, service, tmp_path)
    play(wh, lambda: sync_file(path, store=state), hook.wait_for)
    volume = hook.bodies[0]
    assert "users" in volume["text"]
    assert "http://status.example:8788/cdi/integrations/users/job_sync_status" in volume["text"]
    fields = {f["text"].split("\n")[0].strip("*"): f["text"].split("\n")[1]
              for f in volume["blocks"][1]["fields"]}
    assert fields["rows_read"] == "100" and fields["rows_read_median"] == "10,000"
    assert fields["rows_read_change"] == "drop" and fields["factor"] == "5"
    assert state.raised_alerts("users") == set()
    _no_secret_anywhere(hook, state, caplog.text)


def _synced_once(wh: Warehouse, service: Service, state: StateStore, tmp_path: Path) -> Path:
    """A file that wants its rows within 2 h, run once over 100 rows."""
    path = _file(wh, service, tmp_path, fresh_within="2h")
    wh.insert("users_sync", rows(0, 100))
    wh.engine.dispose()
    sync_file(path, store=state)
    return path


def test_freshness_is_raised_once_by_the_watch_and_cleared_by_the_next_run(
    service: Service, state: StateStore, wh: Warehouse, hook: Receiver, tmp_path: Path,
) -> None:
    path = _synced_once(wh, service, state, tmp_path)
    later = datetime.now(UTC) + timedelta(hours=3)
    watch = FreshnessWatch(state, tmp_path, every=60, clock=lambda: later)
    for _ in range(3):  # looked at three times: raised once
        watch.check_once()
        check_freshness(load_integration(path), state, later)
    assert hook.alerts() == [("freshness", "raised")]
    assert "seconds_since" in str(hook.bodies[0]["blocks"])
    sync_file(path, store=state)  # a successful run: fresh again
    assert hook.alerts() == [("freshness", "raised"), ("freshness", "cleared")]


def test_the_alerts_after_a_run_are_evaluated_at_one_now(
    service: Service, state: StateStore, wh: Warehouse, hook: Receiver, tmp_path: Path,
) -> None:
    """The freshness found and the time its alert is raised at are one reading of the clock."""
    path = _synced_once(wh, service, state, tmp_path)
    later = datetime.now(UTC) + timedelta(hours=3)
    read: list[datetime] = []

    def clock() -> datetime:
        read.append(later)
        return later

    after_run(load_integration(path), state, clock=clock)
    assert hook.alerts() == [("freshness", "raised")]
    assert len(read) == 1


def test_the_status_server_watches_a_folder_whose_defaults_set_fresh_within(
    service: Service, state: StateStore, wh: Warehouse, hook: Receiver, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = tmp_path / "config"
    folder.mkdir()
    (folder / "_defaults.yaml").write_text(yaml.safe_dump(
        {"alerts": {"fresh_within": "1s", "webhook_url": f"${{{HOOK}}}"}}))
    path = write_integration(folder, "users", integration_body(wh, service, "attributes",
                                                               "users_sync"))
    assert load_integration(path).alerts is not None  # the folder's section, taken
    wh.insert("users_sync", rows(0, 10))
    wh.engine.dispose()
    sync_file(path, store=state)
    monkeypatch.setenv("ENGAGE_SYNC_FRESHNESS_CHECK_SECONDS", "0.1")
    app = create_app(state, "t" * 32, config_dir=folder)
    try:
        with served(app, "t" * 32):
            assert hook.wait_for(1) == [("freshness", "raised")]
            checks = 0
            while checks < 10:  # ten more looks at a condition that still holds
                app.state.freshness.check_once()
                checks += 1
    finally:
        app.state.freshness.stop()
    assert hook.alerts() == [("freshness", "raised")]


def test_a_failing_webhook_is_one_warning_and_never_fails_the_run(
    service: Service, state: StateStore, wh: Warehouse, hook: Receiver, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = _file(wh, service, tmp_path)
    wh.insert("users_sync", rows(0, 10, bad=True))
    wh.engine.dispose()
    hook.status = 500
    with caplog.at_level(logging.WARNING, logger="engage_sync.alerts"):
        result = sync_file(path, store=state)
    assert result.record is not None and result.record["job_status"] == "error"
    lines = [r.getMessage() for r in caplog.records if r.name == "engage_sync.alerts"]
    assert len(lines) == 1 and "HTTP 500" in lines[0] and "failed alert" in lines[0], lines
    assert state.raised_alerts("users") == {"failed"}  # raised, not delivered again
    _no_secret_anywhere(hook, state, caplog.text)


def test_without_its_variable_the_webhook_is_one_warning_naming_the_variable(
    service: Service, state: StateStore, wh: Warehouse, hook: Receiver, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = _file(wh, service, tmp_path)
    monkeypatch.delenv(HOOK)
    wh.insert("users_sync", rows(0, 10, bad=True))
    wh.engine.dispose()
    with caplog.at_level(logging.WARNING, logger="engage_sync.alerts"):
        sync_file(path, store=state)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "engage_sync.alerts"]
    assert HOOK in line and "alerts.webhook_url" in line


@pytest.mark.parametrize("alerts, key", [
    ({"factor": 1}, "alerts.factor"),
    ({"factor": "lots"}, "alerts.factor"),
    ({"fresh_within": "soon"}, "alerts.fresh_within"),
    ({"webhook_url": "https://hooks.example/T0/B0/secret"}, "alerts.webhook_url"),
    ({"webhook": "${X}"}, "alerts.webhook"),
])
def test_a_bad_alerts_section_names_its_key_and_never_its_value(
    alerts: dict[str, Any], key: str, service: Service, tmp_path: Path,
) -> None:
    wh = Warehouse("duckdb", "duckdb:///unused.duckdb", sa.create_engine("duckdb://"))
    for where in ("file", "folder"):
        folder = tmp_path / where
        folder.mkdir()
        body = integration_body(wh, service, "attributes", "users_sync")
        if where == "file":
            body["alerts"] = alerts
        else:
            (folder / "_defaults.yaml").write_text(yaml.safe_dump({"alerts": alerts}))
        (folder / "users.yaml").write_text(yaml.safe_dump(body))
        with pytest.raises(ConfigError) as raised:
            load_integration(folder / "users.yaml")
        said = str(raised.value)
        assert f"'{key}'" in said, said
        assert ("_defaults.yaml" in said) == (where == "folder")
        assert "hooks.example" not in said and "secret" not in said.replace("a secret", "")


def test_a_folder_sets_only_alerts_and_a_file_overrides_its_keys(
    service: Service, tmp_path: Path,
) -> None:
    wh = Warehouse("duckdb", "duckdb:///unused.duckdb", sa.create_engine("duckdb://"))
    (tmp_path / "_defaults.yaml").write_text(yaml.safe_dump(
        {"alerts": {"factor": 10, "fresh_within": "2h"}}))
    body = integration_body(wh, service, "attributes", "users_sync", alerts={"factor": 3})
    (tmp_path / "users.yaml").write_text(yaml.safe_dump(body))
    alerts = load_integration(tmp_path / "users.yaml").alerts
    assert alerts is not None and alerts.factor == 3
    assert alerts.fresh_within == timedelta(hours=2)
    (tmp_path / "_defaults.yaml").write_text(yaml.safe_dump({"max_deletes": 5}))
    with pytest.raises(ConfigError, match="key 'max_deletes' cannot be set for a whole folder"):
        load_integration(tmp_path / "users.yaml")


assert NORMAL >= 10_000  # the "about 10,000 rows"
