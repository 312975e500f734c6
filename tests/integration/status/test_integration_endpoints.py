"""The service's integration endpoints on the status server, over real HTTP on loopback:
`GET /cdi/integrations` lists every integration file of the config folder (10 a page, the Link
rules of job_sync_status), and `POST /cdi/integrations/{id}/sync` starts exactly one real run
against the sandbox, answering 429 `Another job is in progress` while it runs."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from engage_sync.adapters.status_server import create_app
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    Service,
    Warehouse,
    integration_body,
    served,
    user_rows,
    users_table,
    write_integration,
)

TOKEN = "test-token-0123456789abcdef"
LINK = re.compile(r'<([^>]+)>; rel="(prev|next)"')
KEYS = {"integration_id", "integration_name", "integration_type", "integration_status",
        "warehouse_type", "last_updated_at", "last_job_start_time", "last_job_status",
        "app_group_id", "contact_emails", "next_scheduled_run"}


def links(response: httpx.Response) -> dict[str, str]:
    return {rel: url for url, rel in LINK.findall(response.headers.get("link") or "")}


def folder_of(tmp_path: Path, count: int) -> Path:
    """`count` valid integration files i00…, one that does not load, one skipped (`_`)."""
    folder = tmp_path / "config"
    folder.mkdir()
    for k in range(count):
        (folder / f"i{k:02d}.yaml").write_text(
            "kind: events\nrow_key: [EVENT_ID]\nsource: {table: t}\n"
            "warehouse: {url: 'postgresql+psycopg://u:${PW}@h/db'}\n")
    (folder / "broken.yaml").write_text("kind: nonsense\n")
    (folder / "_draft.yaml").write_text("kind: attributes\n")  # `_defaults.yaml` has a meaning
    return folder


@pytest.mark.parametrize(("count", "sizes"), [(3, [4]), (9, [10]), (21, [10, 10, 2])])
def test_the_list_names_every_file_paged_as_the_service_pages(
        state: StateStore, tmp_path: Path, count: int, sizes: list[int]) -> None:
    folder = folder_of(tmp_path, count)
    run_id = state.open_run("i01", "incremental", None, None)
    state.finish_run(run_id, "success")
    with served(create_app(state, TOKEN, folder), TOKEN) as client:
        pages, url = [], "/cdi/integrations"
        while True:
            answer = client.get(url)
            assert answer.status_code == 200 and answer.json()["message"] == "success"
            pages.append((answer.json()["results"], links(answer)))
            if "next" not in links(answer):
                break
            url = links(answer)["next"]
        assert [len(results) for results, _ in pages] == sizes
        for k, (_, found) in enumerate(pages):
            assert ("prev" in found) == (k > 0) and ("next" in found) == (k < len(pages) - 1)
        if len(pages) > 1:  # prev of the last page leads to the page before it
            back = client.get(pages[-1][1]["prev"]).json()["results"]
            assert back == pages[-2][0]
        assert client.get("/cdi/integrations", params={"cursor": "%%"}).status_code == 400
        assert client.get("/cdi/integrations", headers={"Authorization": "Bearer x"}
                          ).status_code == 401
    entries = {e["integration_id"]: e for results, _ in pages for e in results}
    assert list(entries) == sorted(["broken", *(f"i{k:02d}" for k in range(count))])
    assert all(set(e) == KEYS for e in entries.values())
    assert entries["broken"]["integration_status"] == "config_error"
    ran = entries["i01"]
    assert (ran["integration_status"], ran["integration_type"], ran["warehouse_type"]) == (
        "active", "events", "postgresql")
    assert ran["last_job_status"] == "success" and ran["last_job_start_time"].endswith("Z")
    assert entries["i00"]["last_job_status"] is None


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def _users_folder(wh: Warehouse, svc: Service, tmp_path: Path, rows: int) -> Path:
    """A config folder holding one integration, `users`, over `rows` rows."""
    folder = tmp_path / "config"
    folder.mkdir()
    users_table(wh)
    wh.insert("users_sync", user_rows(rows))
    write_integration(folder, "users", integration_body(wh, svc, "attributes", "users_sync"))
    return folder


def test_post_sync_starts_exactly_one_run_and_answers_429_while_it_runs(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path) -> None:
    folder = _users_folder(warehouse, service, tmp_path, 150)
    service.faults([{"path": "/users/track", "action": "delay", "delay_seconds": 1.5,
                     "nth": [1]}])  # the run lasts long enough to be asked again
    app = create_app(state, TOKEN, folder)
    with served(app, TOKEN) as client:
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: client.post("/cdi/integrations/users/sync"),
                                    range(6)))
        assert sorted(a.status_code for a in answers) == [202, 429, 429, 429, 429, 429]
        assert {a.json()["message"] for a in answers} == {"success",
                                                          "Another job is in progress"}
        app.state.starter.join(60)
        assert state.count_runs("users") == 1
        first = client.get("/cdi/integrations").json()["results"][0]
        assert first["last_job_status"] == "success"
        assert len({o["external_id"] for r in service.requests()
                    for o in r["body"]["attributes"]}) == 150
        assert client.post("/cdi/integrations/users/sync").status_code == 202  # done: again
        app.state.starter.join(60)
    assert state.count_runs("users") == 2


def test_post_sync_refuses_while_another_process_holds_the_run(
        state: StateStore, tmp_path: Path) -> None:
    folder = folder_of(tmp_path, 1)
    state.open_run("i00", "incremental", None, None, owner="elsewhere", lease_seconds=60)
    started: list[Path] = []
    app = create_app(state, TOKEN, folder, sync=started.append)
    with served(app, TOKEN) as client:
        busy = client.post("/cdi/integrations/i00/sync")
        assert (busy.status_code, busy.json()) == (429, {"message": "Another job is in progress"})
        assert client.post("/cdi/integrations/nobody/sync").json() == {
            "message": "Integration not found"}
        assert client.post("/cdi/integrations/nobody/sync").status_code == 404
        assert client.post("/cdi/integrations/bad%20id/sync").status_code == 400
        assert client.post("/cdi/integrations/broken/sync",
                           headers={"Authorization": "Bearer x"}).status_code == 401
        assert client.post("/cdi/integrations/broken/sync").status_code == 202
        app.state.starter.join(10)
    assert started == [folder / "broken.yaml"]


def _find_job_after(results: list[dict[str, Any]], triggered_after: datetime
                    ) -> dict[str, Any] | None:
    """airflow-provider-braze 1.0.4, `BrazeHook._find_job_after`, restated (the provider
    imports Airflow): the newest record, if it started at or after the trigger."""
    if not results or not results[0].get("sync_start_time"):
        return None
    job = results[0]
    started = datetime.fromisoformat(job["sync_start_time"].replace("Z", "+00:00"))
    return job if started >= triggered_after else None


def test_the_airflow_providers_trigger_and_wait_work_unchanged(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path) -> None:
    """The calls of airflow-provider-braze's `BrazeRunCDIJobOperator` (trigger, then poll
    job_sync_status until a terminal status), with its headers: a client written for the
    service's endpoints finds the run it started and its counts."""
    folder = _users_folder(warehouse, service, tmp_path, 40)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    app = create_app(state, TOKEN, folder)
    with served(app, TOKEN) as client:
        triggered_after = datetime.now(UTC)
        trigger = client.post("/cdi/integrations/users/sync", headers=headers)
        trigger.raise_for_status()
        assert trigger.json() == {"message": "success"}
        job = None
        for _ in range(100):
            status = client.get("/cdi/integrations/users/job_sync_status", headers=headers)
            status.raise_for_status()
            job = _find_job_after(status.json()["results"], triggered_after)
            if job is not None and job["job_status"] in {"success", "partial", "error",
                                                         "config_error"}:
                break
            time.sleep(0.1)
        assert job is not None and job["job_status"] == "success"
        assert (job["rows_synced"], job["rows_failed_with_errors"]) == (40, 0)
        app.state.starter.join(30)
