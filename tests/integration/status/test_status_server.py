"""The status endpoint against a state store filled with runs: pages, Link headers, errors, auth.

Spec (GET /cdi/integrations/{integration_id}/job_sync_status): 10 records a page; the Link
header is absent with 10 or fewer records in total, has no prev on a call without cursor and no
next on the last page; 400 `Invalid cursor` and 400 `Invalid integration ID`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engage_sync.adapters.status_server import create_app
from engage_sync.adapters.wiring import open_state
from engage_sync.cli.main import main
from engage_sync.state.schema import runs
from engage_sync.state.store import StateStore
from engage_sync.status.record import encode_page_cursor, page
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    integration_body,
    served,
    user_rows,
    users_table,
    write_integration,
)

TOKEN = "test-token-0123456789abcdef"
SIX = {"job_status", "sync_start_time", "sync_finish_time", "last_timestamp_synced",
       "rows_synced", "rows_failed_with_errors", "data_points_sent", "data_points_saved"}
LINK = re.compile(r'<([^>]+)>; rel="(prev|next)"')


def add_runs(store: StateStore, integration: str, n: int) -> None:
    """n finished runs; run k synced k rows, so a record names its run."""
    for _ in range(n):
        run_id = store.open_run(integration, "incremental", None, None)
        store.finish_run(run_id, "success")
        with store.engine.begin() as conn:
            conn.execute(runs.update().where(runs.c.run_id == run_id)
                         .values(rows_synced=store.count_runs(integration)))


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return open_state(f"sqlite:///{tmp_path / 'state.db'}")


@pytest.fixture
def client(store: StateStore, tmp_path: Path) -> Iterator[httpx.Client]:
    """The status app served by uvicorn on a free loopback port, and a client with the token."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "fresh.yaml").write_text("kind: attributes\n")
    with served(create_app(store, TOKEN, tmp_path / "config"), TOKEN) as c:
        yield c


def links(response: httpx.Response) -> dict[str, str]:
    header = response.headers.get("link")
    return {rel: url for url, rel in LINK.findall(header or "")}


def get(client: httpx.Client, integration: str, url: str | None = None) -> httpx.Response:
    return client.get(url or f"/cdi/integrations/{integration}/job_sync_status")


def walk(client: httpx.Client, integration: str) -> list[tuple[list[int], dict[str, str]]]:
    """Follow `next` from the first page: (rows_synced of each record, links) per page."""
    pages = []
    url: str | None = None
    while True:
        response = get(client, integration, url)
        assert response.status_code == 200
        body = response.json()
        assert body["message"] == "success"
        assert all(set(r) == SIX for r in body["results"])
        found = links(response)
        pages.append(([r["rows_synced"] for r in body["results"]], found))
        if "next" not in found:
            return pages
        url = found["next"]


@pytest.mark.parametrize(("total", "sizes"), [
    (0, [0]), (10, [10]), (11, [10, 1]), (25, [10, 10, 5])])
def test_pages_and_link_headers_follow_the_service_rules(
    store: StateStore, client: httpx.Client, total: int, sizes: list[int]
) -> None:
    add_runs(store, "users", total)
    integration = "users" if total else "fresh"  # a configured integration without runs
    pages = walk(client, integration)
    assert [len(rows) for rows, _ in pages] == sizes
    seen = [n for rows, _ in pages for n in rows]
    assert seen == list(range(total, 0, -1))  # newest first, each record once
    first_links = pages[0][1]
    assert "prev" not in first_links  # never prev on a call without cursor
    if total <= 10:
        assert get(client, integration).headers.get("link") is None
    for k, (_, found) in enumerate(pages):
        assert ("next" in found) == (k < len(pages) - 1)  # no next on the last page
        assert ("prev" in found) == (k > 0)
        assert all(u.startswith(f"{client.base_url}/cdi/integrations/{integration}/"
                                f"job_sync_status?cursor=") for u in found.values())
    if len(pages) > 1:  # prev from the last page leads back to the page before it
        last = walk_to(client, integration, len(pages) - 1)
        back = get(client, integration, links(last)["prev"])
        assert [r["rows_synced"] for r in back.json()["results"]] == pages[-2][0]


def walk_to(client: httpx.Client, integration: str, index: int) -> httpx.Response:
    response = get(client, integration)
    for _ in range(index):
        response = get(client, integration, links(response)["next"])
    return response


def test_a_page_stays_the_same_while_new_runs_are_added(
    store: StateStore, client: httpx.Client
) -> None:
    add_runs(store, "users", 25)
    second = links(get(client, "users"))["next"]
    before = get(client, "users", second).json()["results"]
    add_runs(store, "users", 3)
    after = get(client, "users", second).json()["results"]
    assert [r["rows_synced"] for r in after] == [r["rows_synced"] for r in before]
    assert [r["rows_synced"] for r in before] == list(range(15, 5, -1))


@pytest.mark.parametrize("cursor", ["not-a-cursor", "%%%", encode_page_cursor(99),
                                    encode_page_cursor(0), "cjEw"])
def test_a_bad_cursor_is_refused_with_invalid_cursor(
    store: StateStore, client: httpx.Client, cursor: str
) -> None:
    add_runs(store, "users", 25)
    response = client.get("/cdi/integrations/users/job_sync_status", params={"cursor": cursor})
    assert response.status_code == 400
    assert response.json() == {"message": "Invalid cursor"}


@pytest.mark.parametrize("integration", ["nobody", "bad%20id", "x" * 101])
def test_an_unknown_integration_is_refused_with_invalid_integration_id(
    store: StateStore, client: httpx.Client, integration: str
) -> None:
    add_runs(store, "users", 1)
    response = get(client, integration)
    assert response.status_code == 400
    assert response.json() == {"message": "Invalid integration ID"}


@pytest.mark.parametrize("header", [None, "Bearer wrong-token-0123456789", f"Basic {TOKEN}",
                                    f"Bearer {TOKEN}x"])
def test_requests_without_the_bearer_token_get_401(
    store: StateStore, client: httpx.Client, header: str | None
) -> None:
    add_runs(store, "users", 1)
    headers = {"Authorization": header} if header else {}
    client.headers.pop("Authorization")
    response = client.get("/cdi/integrations/users/job_sync_status", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "results" not in response.json()


def test_the_cli_status_pages_with_the_same_cursors(
    store: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_runs(store, "users", 11)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    assert main(["status", "users", "--state-url", url]) == 0
    first = json.loads(capsys.readouterr().out)
    assert len(first["results"]) == 10 and first["prev_cursor"] is None
    assert first["results"][0]["rows_read"] == 11  # the CLI shows engage-sync's own counts
    assert main(["status", "users", "--state-url", url, "--cursor", first["next_cursor"]]) == 0
    second = json.loads(capsys.readouterr().out)
    assert [r["rows_synced"] for r in second["results"]] == [1]
    assert second["next_cursor"] is None and second["prev_cursor"] is not None
    assert page(store, "users", second["prev_cursor"]).results[0]["rows_synced"] == 11
    assert main(["status", "users", "--state-url", url, "--cursor", "bogus"]) == 2
    assert "Invalid cursor" in capsys.readouterr().err


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_metrics_parse_with_prometheus_parser_and_equal_the_records(
        client: httpx.Client, store: StateStore, warehouse: Warehouse, service: Service,
        tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from engage_sync.adapters.wiring import sync_file

    users_table(warehouse)
    rows = [*user_rows(120), {"updated_at": T0, "external_id": "bad", "payload": "{"}]
    warehouse.insert("users_sync", rows)
    path = write_integration(tmp_path, "users", integration_body(
        warehouse, service, "attributes", "users_sync"))
    sync_file(path, store=store)
    sync_file(path, store=store)  # a second, empty run: counted as a run, adds nothing
    records = [page_record for page_record in page(store, "users", None).results]
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    got = {(s.name, s.labels.get("integration"), s.labels.get("job_status")): s.value
           for family in text_string_to_metric_families(answer.text) for s in family.samples}
    assert got[("engage_sync_runs_total", "users", "partial")] == 1
    assert got[("engage_sync_runs_total", "users", "success")] == 1
    for name, field in (("rows_synced", "rows_synced"), ("rows_rejected", "rows_rejected"),
                        ("rows_failed", "rows_failed_with_errors"),  # rejects included
                        ("data_points_sent", "data_points_sent")):
        assert got[(f"engage_sync_{name}_total", "users", None)] == sum(
            r[field] for r in records), name
    assert got[("engage_sync_rows_synced_total", "users", None)] == 120
    assert got[("engage_sync_last_success_timestamp_seconds", "users", None)] > 0
