"""OpenLineage events of real runs against the sandbox, through the client's file transport and
its HTTP transport (a loopback receiver): START then COMPLETE or FAIL, the table and the
endpoint as datasets, the record's counts as facets, and no credential in any event.

The OpenLineage JSON schema is not shipped by openlineage-python and cannot be fetched here, so
each event is checked three ways: against RUN_EVENT (the spec 2-0-2 RunEvent's required fields
and formats, restated below), by rebuilding it from the client's own attrs classes (their
validators: a UUID run id, an ISO time, URIs), and its `engageSync` facet against the schema
engage-sync ships (src/engage_sync/adapters/EngageSyncRunFacet.json).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState

from engage_sync.adapters.wiring import sync_file
from engage_sync.errors import SyncError
from engage_sync.state.store import StateStore
from engage_sync.status.record import record
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    held_run,
    integration_body,
    user_rows,
    users_table,
    write_integration,
)

ROOT = Path(__file__).resolve().parents[3]
FACET_SCHEMA = json.loads(
    (ROOT / "src" / "engage_sync" / "adapters" / "EngageSyncRunFacet.json").read_text())
PG_PASSWORD = "lineage-pw-5b1e0c"  # trust auth accepts it; no event may show it
URI = {"type": "string", "format": "uri"}
FACETS = {"type": "object", "additionalProperties": {
    "type": "object", "required": ["_producer", "_schemaURL"],
    "properties": {"_producer": URI, "_schemaURL": URI}}}
DATASET = {"type": "object", "required": ["namespace", "name"],
           "properties": {"namespace": {"type": "string"}, "name": {"type": "string"},
                          "facets": FACETS, "inputFacets": FACETS, "outputFacets": FACETS}}
RUN_EVENT = {  # OpenLineage 2-0-2: BaseEvent's and RunEvent's required fields and formats
    "type": "object",
    "required": ["eventTime", "producer", "schemaURL", "run", "job"],
    "properties": {
        "eventType": {"enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
        "eventTime": {"type": "string", "format": "date-time"},
        "producer": URI,
        "schemaURL": {"const": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"},
        "run": {"type": "object", "required": ["runId"], "properties": {
            "runId": {"type": "string", "format": "uuid"}, "facets": FACETS}},
        "job": {"type": "object", "required": ["namespace", "name"], "properties": {
            "namespace": {"type": "string"}, "name": {"type": "string"}, "facets": FACETS}},
        "inputs": {"type": "array", "items": DATASET},
        "outputs": {"type": "array", "items": DATASET},
    },
}


def check_event(event: dict[str, Any]) -> None:
    """Valid by the spec's rules, by the client's own classes, and its facet by ours."""
    jsonschema.validate(event, RUN_EVENT, format_checker=jsonschema.FormatChecker())
    RunEvent(eventType=RunState(event["eventType"]), eventTime=event["eventTime"],
             producer=event["producer"], run=Run(runId=event["run"]["runId"]),
             job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"]),
             inputs=[InputDataset(d["namespace"], d["name"]) for d in event["inputs"]],
             outputs=[OutputDataset(d["namespace"], d["name"]) for d in event["outputs"]])
    if "engageSync" in event["run"]["facets"]:
        jsonschema.validate(event["run"]["facets"]["engageSync"], FACET_SCHEMA)


@pytest.fixture
def lineage_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No OpenLineage setting from outside; afterwards none left behind (the client copies
    OPENLINEAGE_URL into OPENLINEAGE__TRANSPORT__TRANSPORTS__* variables of its own)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OPENLINEAGE")}
    for key in saved:
        monkeypatch.delenv(key)
    yield monkeypatch
    for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
        del os.environ[key]
    os.environ.update(saved)


def file_transport(env: pytest.MonkeyPatch, path: Path) -> None:
    env.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    env.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(path))
    env.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")


def events_in(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def users_file(wh: Warehouse, svc: Service, folder: Path, rows: list[dict[str, Any]],
               url: str | None = None, table: str = "users_sync") -> Path:
    users_table(wh)
    wh.insert("users_sync", rows)
    body = integration_body(wh, svc, "attributes", table)
    body["warehouse"]["url"] = url or wh.url
    return write_integration(folder, "users", body)


def expected_input(wh: Warehouse, tmp_path: Path) -> tuple[str, str]:
    if wh.name == "duckdb":
        return f"duckdb://{(tmp_path / 'warehouse.duckdb').resolve()}", "warehouse.main.users_sync"
    schema = wh.url.rsplit("%3D", 1)[1]
    port = wh.url.split("@127.0.0.1:", 1)[1].split("/", 1)[0]
    return f"postgres://127.0.0.1:{port}", f"postgres.{schema}.users_sync"


def test_a_run_emits_start_and_complete_with_its_datasets_and_counts(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        lineage_env: pytest.MonkeyPatch, sandbox_key: str) -> None:
    events_file = tmp_path / "lineage.jsonl"
    file_transport(lineage_env, events_file)
    url = warehouse.url
    if warehouse.name == "postgres":  # a password, by reference, that no event may show
        lineage_env.setenv("LINEAGE_PG_PW", PG_PASSWORD)
        url = url.replace("postgres@", "postgres:${LINEAGE_PG_PW}@", 1)
    rows = [*user_rows(120), {"updated_at": T0, "external_id": "bad", "payload": "{"}]
    record = sync_file(users_file(warehouse, service, tmp_path, rows, url), store=state).record
    assert record is not None and record["job_status"] == "partial"
    events = events_in(events_file)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        check_event(event)
    assert len({e["run"]["runId"] for e in events}) == 1
    done = events[-1]
    assert done["job"] == {**done["job"], "namespace": "engage-sync", "name": "users"}
    namespace, name = expected_input(warehouse, tmp_path)
    assert [(d["namespace"], d["name"]) for d in done["inputs"]] == [(namespace, name)]
    assert [(d["namespace"], d["name"]) for d in done["outputs"]] == [
        (service.base_url.rstrip("/"), "/users/track")]
    facet = done["run"]["facets"]["engageSync"]
    assert (facet["rowsRead"], facet["rowsSynced"], facet["rowsRejected"]) == (121, 120, 1)
    assert facet["dataPointsBilled"] == record["data_points_sent"] > 0
    assert facet["dataPointsSaved"] == record["data_points_saved"]
    assert facet["runId"] == record["run_id"]
    assert done["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 121
    assert done["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 120
    text = events_file.read_text()
    assert sandbox_key not in text and PG_PASSWORD not in text


class Receiver(BaseHTTPRequestHandler):
    """A lineage backend on loopback: keeps each POST (path, auth header, body)."""

    received: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers.get("Authorization", ""),
                              json.loads(body)))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, str, dict[str, Any]]]]]:
    received: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []
    handler = type("Handler", (Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_the_http_transport_posts_each_event_to_the_lineage_backend(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        lineage_env: pytest.MonkeyPatch, sandbox_key: str,
        receiver: tuple[str, list[tuple[str, str, dict[str, Any]]]]) -> None:
    url, received = receiver
    lineage_env.setenv("OPENLINEAGE_URL", url)
    lineage_env.setenv("OPENLINEAGE_API_KEY", "lineage-backend-key")
    lineage_env.setenv("OPENLINEAGE_NAMESPACE", "team-syncs")
    sync_file(users_file(warehouse, service, tmp_path, user_rows(30)), store=state)
    assert [(path, auth, e["eventType"]) for path, auth, e in received] == [
        ("/api/v1/lineage", "Bearer lineage-backend-key", "START"),
        ("/api/v1/lineage", "Bearer lineage-backend-key", "COMPLETE")]
    for _, _, event in received:
        check_event(event)
        assert event["job"]["namespace"] == "team-syncs"
        assert sandbox_key not in json.dumps(event)
    assert received[-1][2]["run"]["facets"]["engageSync"]["rowsSynced"] == 30


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
@pytest.mark.parametrize("failure", ["every row rejected", "the run raised"])
def test_a_failed_run_emits_fail(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        lineage_env: pytest.MonkeyPatch, sandbox_key: str, failure: str) -> None:
    events_file = tmp_path / "lineage.jsonl"
    file_transport(lineage_env, events_file)
    rows = [{"updated_at": T0, "external_id": f"bad{i}", "payload": "{"} for i in range(3)]
    if failure == "every row rejected":
        record = sync_file(users_file(warehouse, service, tmp_path, rows), store=state).record
        assert record is not None and record["job_status"] == "error"
    else:
        with pytest.raises(SyncError):
            sync_file(users_file(warehouse, service, tmp_path, rows, table="no_such_table"),
                      store=state)
    events = events_in(events_file)
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    for event in events:
        check_event(event)
    facets = events[-1]["run"]["facets"]
    assert facets["errorMessage"]["message"]
    assert facets["errorMessage"]["programmingLanguage"] == "python"
    if failure == "every row rejected":
        assert (facets["engageSync"]["rowsRejected"], facets["engageSync"]["rowsSynced"]) == (3, 0)
    else:
        assert "no_such_table" in facets["errorMessage"]["message"]
    (run,) = state.runs_newest_first("users", 0, 1)  # the counts of the record it left
    assert (facets["engageSync"]["runId"], facets["engageSync"]["jobStatus"]) == (
        run["run_id"], "error")
    assert sandbox_key not in events_file.read_text()


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_run_stopped_by_a_401_tells_fail_with_the_counts_of_its_record(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        lineage_env: pytest.MonkeyPatch) -> None:
    """A refused key raises out of the run after its record is written: the FAIL event
    carries that record's counts, as every COMPLETE does, not the error message alone."""
    events_file = tmp_path / "lineage.jsonl"
    file_transport(lineage_env, events_file)
    rows = [*user_rows(20), {"updated_at": T0, "external_id": "bad", "payload": "{"}]
    path = users_file(warehouse, service, tmp_path, rows)
    lineage_env.setenv("ENGAGE_API_KEY", "a-rotated-key-0000")
    with pytest.raises(SyncError):
        sync_file(path, store=state)
    events = events_in(events_file)
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    for event in events:
        check_event(event)
    (run,) = state.runs_newest_first("users", 0, 1)
    kept = record(run)
    facet = events[-1]["run"]["facets"]["engageSync"]
    assert (facet["runId"], facet["jobStatus"]) == (kept["run_id"], "error")
    assert (facet["rowsRead"], facet["rowsSynced"], facet["rowsRejected"], facet["rowsFailed"],
            facet["rowsInDoubt"]) == (kept["rows_read"], kept["rows_synced"],
                                      kept["rows_rejected"], kept["rows_failed_with_errors"],
                                      kept["rows_in_doubt"])
    assert "401" in events[-1]["run"]["facets"]["errorMessage"]["message"]


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_no_event_unless_the_environment_configures_openlineage(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        lineage_env: pytest.MonkeyPatch) -> None:
    """An openlineage.yml in the working folder alone (the client would read it) is not a
    switch: only OPENLINEAGE_URL, OPENLINEAGE_CONFIG or OPENLINEAGE__TRANSPORT__TYPE are."""
    events_file = tmp_path / "lineage.jsonl"
    (tmp_path / "openlineage.yml").write_text(
        f"transport:\n  type: file\n  log_file_path: {events_file}\n  append: true\n")
    lineage_env.chdir(tmp_path)
    path = users_file(warehouse, service, tmp_path, user_rows(5))
    sync_file(path, store=state)
    assert not events_file.exists()
    lineage_env.setenv("OPENLINEAGE_CONFIG", str(tmp_path / "openlineage.yml"))
    sync_file(path, store=state)
    assert [e["eventType"] for e in events_in(events_file)] == ["START", "COMPLETE"]


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_start_refused_for_a_run_in_progress_tells_nothing(
        warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
        lineage_env: pytest.MonkeyPatch, sandbox_key: str) -> None:
    """A schedule's tick while another process runs the integration is no run: no START, no
    FAIL (every tick of a long first load would otherwise be a failed job in lineage)."""
    from engage_sync.errors import RunInProgress

    events_file = tmp_path / "lineage.jsonl"
    file_transport(lineage_env, events_file)
    path = users_file(warehouse, service, tmp_path, user_rows(5))
    held_run(state, "users")
    with pytest.raises(RunInProgress, match="still in progress"):
        sync_file(path, store=state)
    assert not events_file.exists() or events_in(events_file) == []
