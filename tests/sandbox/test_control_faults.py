"""The control plane (/_sandbox/...) and scripted faults, over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from engage_sandbox.state.settings import SandboxSettings
from engage_sandbox.web.server import SandboxHandle, run_sandbox
from tests.sandbox.conftest import profile

T = "2024-05-01T12:00:00Z"
EVENT = {"external_id": "u1", "name": "played", "time": T}
TRACK = {"events": [EVENT]}


def set_faults(control: httpx.Client, rules: Any) -> dict[str, Any]:
    response = control.post("/faults", json=rules)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def events(control: httpx.Client) -> int:
    count: int = control.get("/counters").json()["events"]
    return count


# ---- control plane ---------------------------------------------------------------------------


def test_health(control: httpx.Client) -> None:
    assert control.get("/health").json() == {"status": "ok", "lean": False}


def test_request_log(client: httpx.Client, control: httpx.Client) -> None:
    before = time.time()
    client.post("/users/track", json=TRACK, headers={"X-Braze-Bulk": "true"})
    client.post("/users/delete", json={"external_ids": ["u1"]})
    client.post("/users/track", json={})
    log = control.get("/requests").json()["requests"]
    assert [(e["seq"], e["method"], e["path"], e["status"]) for e in log] == [
        (1, "POST", "/users/track", 201), (2, "POST", "/users/delete", 201),
        (3, "POST", "/users/track", 400)]
    assert log[0]["headers"]["x-braze-bulk"] == "true"
    assert log[0]["body"] == TRACK
    assert before <= log[0]["received_at"] <= log[2]["received_at"] <= time.time()
    assert "authorization" not in log[0]["headers"]
    only = control.get("/requests", params={"path": "/users/delete"}).json()["requests"]
    assert [e["seq"] for e in only] == [2]


def test_profile_lookup_by_every_identifier(client: httpx.Client, control: httpx.Client) -> None:
    client.post("/users/track", json={
        "attributes": [{"external_id": "u1", "email": "u1@x.io", "phone": "+14155550100"}],
        "events": [{**EVENT, "properties": {"k": "v"}}],
        "purchases": [{"external_id": "u1", "product_id": "p", "currency": "USD", "price": 2,
                       "quantity": 2, "time": T}]})
    client.post("/users/alias/new", json={"user_aliases": [
        {"external_id": "u1", "alias_name": "a", "alias_label": "l"}]})
    stored = profile(control, external_id="u1")
    assert stored is not None
    assert stored["events"] == [{"name": "played", "time": T, "properties": {"k": "v"}}]
    assert stored["purchases"] == [{"product_id": "p", "currency": "USD", "price": 2,
                                    "quantity": 2, "time": T}]
    for query in ({"email": "u1@x.io"}, {"phone": "+14155550100"},
                  {"platform_id": stored["platform_id"]},
                  {"alias_name": "a", "alias_label": "l"}):
        found = profile(control, **query)
        assert found is not None and found["external_id"] == "u1"
    missing = control.get("/profiles", params={"external_id": "nobody"})
    assert (missing.status_code, missing.json()) == (404, {"message": "profile not found"})


def test_counters(client: httpx.Client, control: httpx.Client) -> None:
    client.post("/users/track", json={
        "attributes": [{"external_id": "u1", "a": 1, "b": 2}, {"email": "e@x.io", "c": 3}],
        "events": [EVENT, EVENT, {**EVENT, "name": "other"},
                   {"user_alias": {"alias_name": "n", "alias_label": "l"}, "name": "x",
                    "time": T, "_update_existing_only": False}],
        "purchases": [{"external_id": "u2", "product_id": "p", "currency": "USD", "price": 1,
                       "time": T}]})
    assert control.get("/counters").json() == {
        "requests": {"/users/track": 1}, "events": 4, "purchases": 1,
        "events_by_user": {"u1": {"played": 2, "other": 1}, "alias:l:n": {"x": 1}},
        "attributes_processed": 2, "data_points": 3 + 4 + 1,
        "data_points_by_key": {"attributes": {"a": 1, "b": 1, "c": 1},
                               "events": {"played": 2, "other": 1, "x": 1},
                               "purchases": {"p": 1}},
        "skipped_update_existing_only": 0}


def test_reset_clears_everything(client: httpx.Client, control: httpx.Client) -> None:
    client.post("/users/track", json=TRACK)
    set_faults(control, [{"path": "/users/track", "action": "500"}])
    assert control.post("/reset").json() == {"message": "reset"}
    assert control.get("/profiles").json() == {"profiles": []}
    assert control.get("/requests").json() == {"requests": []}
    assert control.get("/faults").json() == {"faults": []}
    assert control.get("/counters").json()["requests"] == {}
    response = client.post("/users/track", json=TRACK)
    assert response.status_code == 201 and response.headers["x-ratelimit-remaining"] == "2999"


# ---- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "status", "message"),
    [("429", 429, "Rate limit exceeded"), ("500", 500, "Internal Server Error"),
     ("502", 502, "Bad Gateway"), ("503", 503, "Service Unavailable"),
     ("504", 504, "Gateway Timeout")],
)
def test_status_faults_hit_the_nth_request_only(
    client: httpx.Client, control: httpx.Client, action: str, status: int, message: str
) -> None:
    set_faults(control, [{"path": "/users/track", "action": action, "nth": [2, 4]}])
    codes = [client.post("/users/track", json=TRACK) for _ in range(5)]
    assert [r.status_code for r in codes] == [201, status, 201, status, 201]
    assert codes[1].json() == {"message": message}
    assert "x-ratelimit-reset" in codes[1].headers
    if status == 429:
        assert codes[1].headers["x-ratelimit-remaining"] == "0"
    assert events(control) == 3
    log = control.get("/requests").json()["requests"]
    assert [e["fault"] for e in log] == [None, action, None, action, None]


def test_5xx_after_processing(client: httpx.Client, control: httpx.Client) -> None:
    set_faults(control, [{"path": "/users/track", "action": "500", "nth": [1], "process": True}])
    response = client.post("/users/track", json=TRACK)
    assert (response.status_code, response.json()) == (500, {"message": "Internal Server Error"})
    assert events(control) == 1


def test_drop_processes_then_closes(client: httpx.Client, control: httpx.Client) -> None:
    set_faults(control, [{"path": "/users/track", "action": "drop", "nth": [1]}])
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        client.post("/users/track", json=TRACK)
    assert events(control) == 1
    entry = control.get("/requests").json()["requests"][0]
    assert (entry["status"], entry["fault"]) == (201, "drop")
    assert client.post("/users/track", json=TRACK).status_code == 201


def test_delay(client: httpx.Client, control: httpx.Client) -> None:
    set_faults(control, [{"path": "/users/track", "action": "delay", "delay_seconds": 0.3}])
    started = time.monotonic()
    response = client.post("/users/track", json=TRACK)
    assert response.status_code == 201 and time.monotonic() - started >= 0.3
    assert events(control) == 1


def test_share_is_deterministic(client: httpx.Client, control: httpx.Client) -> None:
    rule = [{"path": "*", "action": "503", "share": 0.4, "seed": 7}]
    runs = []
    for _ in range(2):
        control.post("/reset")
        set_faults(control, rule)
        runs.append([client.post("/users/track", json=TRACK).status_code for _ in range(30)])
    assert runs[0] == runs[1]
    assert 0 < runs[0].count(503) < 30


def test_faults_only_hit_their_path(client: httpx.Client, control: httpx.Client) -> None:
    set_faults(control, [{"path": "/users/delete", "action": "502"}])
    assert client.post("/users/track", json=TRACK).status_code == 201
    assert client.post("/users/delete", json={"external_ids": ["u1"]}).status_code == 502


def test_fault_rules_get_and_delete(control: httpx.Client, client: httpx.Client) -> None:
    rule = {"path": "/users/track", "action": "429", "nth": [3]}
    listed = set_faults(control, rule)["faults"]
    assert listed == [{"path": "/users/track", "action": "429", "nth": [3], "share": None,
                       "seed": 0, "delay_seconds": 1.0, "process": False}]
    assert control.get("/faults").json()["faults"] == listed
    assert control.delete("/faults").json() == {"faults": []}


@pytest.mark.parametrize(
    ("rule", "message"),
    [({"path": "/users/track", "action": "418"},
      "'action' must be one of ['429', '500', '502', '503', '504', 'delay', 'drop']"),
     ({"path": "users", "action": "500"}, "'path' must be a path starting with '/' or '*'"),
     ({"path": "/x", "action": "500", "nth": [0]}, "'nth' must be a list of request numbers >= 1"),
     ({"path": "/x", "action": "500", "share": 2}, "'share' must be a number from 0 to 1"),
     ({"path": "/x", "action": "500", "nth": [1], "share": 0.5},
      "give 'nth' or 'share', not both")],
)
def test_bad_fault_rules(control: httpx.Client, rule: dict[str, Any], message: str) -> None:
    control.post("/reset")
    response = control.post("/faults", json=[rule])
    assert (response.status_code, response.json()) == (400, {"message": message})


def test_initial_faults_and_child_process() -> None:
    """Faults given at start apply from the first request, also in a child process (CLI)."""
    settings = SandboxSettings(faults=[{"path": "/users/track", "action": "503", "nth": [1]}])
    with run_sandbox(settings=settings, in_process=False) as handle:
        _check_first_request_faulted(handle)


def _check_first_request_faulted(handle: SandboxHandle) -> None:
    auth = {"Authorization": f"Bearer {handle.api_key}"}
    codes = [httpx.post(handle.base_url + "/users/track", json=TRACK, headers=auth).status_code
             for _ in range(2)]
    assert codes == [503, 201]
    assert handle.base_url.startswith("http://127.0.0.1:")
