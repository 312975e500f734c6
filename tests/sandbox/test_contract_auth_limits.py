"""Authentication, rate limits, body limits, object-limit modes and lean mode, over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engage_sandbox.state.settings import RateLimit, SandboxSettings
from engage_sandbox.web.server import SandboxHandle, run_sandbox
from tests.sandbox.conftest import TRACK_ONLY_KEY

EVENT = {"external_id": "u1", "name": "played", "time": "2024-05-01T12:00:00Z"}
RATE_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")

# (method, path, permission) for every row of the spec's permission table.
PERMISSION_TABLE: list[tuple[str, str, str]] = [
    ("POST", "/users/track", "users.track"),
    ("POST", "/subscription/status/set", "subscription.status.set"),
    ("POST", "/v2/subscription/status/set", "subscription.status.set"),
    ("POST", "/users/merge", "users.merge"),
    ("POST", "/users/delete", "users.delete"),
    ("POST", "/users/identify", "users.identify"),
    ("POST", "/users/alias/update", "users.alias.update"),
    ("POST", "/canvas/trigger/send", "canvas.trigger.send"),
    ("POST", "/campaigns/trigger/schedule/create", "campaigns.trigger.schedule.create"),
    ("GET", "/custom_attributes", "custom_attributes.get"),
    ("GET", "/cdi/integrations/abc/job_sync_status", "cdi.integration_job_status"),
    ("PUT", "/preference_center/v1/pc-1", "preference_center.update"),
    ("GET", "/preference_center/v1/list", "preference_center.list"),
    ("GET", "/campaign/translations/", "campaigns.translations.get"),
    ("GET", "/canvases/translations", "canvas.translations.get"),
]
SCIM_PATHS = [("POST", "/scim/v2/Users"), ("GET", "/scim/v2/Users/abc"),
              ("PUT", "/scim/v2/Users/abc"), ("DELETE", "/scim/v2/Users/abc"),
              ("GET", "/scim/v2/Users")]
SCIM_ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


@pytest.mark.parametrize(("method", "path", "permission"), PERMISSION_TABLE,
                         ids=[p for _, p, _ in PERMISSION_TABLE])
@pytest.mark.parametrize("auth", [None, "Bearer wrong-key", "Basic c2FuZGJveA=="],
                         ids=["missing", "unknown", "not bearer"])
def test_invalid_key_is_401(
    sandbox: SandboxHandle, method: str, path: str, permission: str, auth: str | None
) -> None:
    headers = {"Authorization": auth} if auth else {}
    response = httpx.request(method, sandbox.base_url + path, headers=headers, json={})
    assert (response.status_code, response.json()) == (401, {"message": "Invalid API Key"})
    assert all(h in response.headers for h in RATE_HEADERS)


@pytest.mark.parametrize(("method", "path", "permission"), PERMISSION_TABLE[1:],
                         ids=[p for _, p, _ in PERMISSION_TABLE[1:]])
def test_key_without_permission_is_403(
    sandbox: SandboxHandle, method: str, path: str, permission: str
) -> None:
    response = httpx.request(method, sandbox.base_url + path, json={},
                             headers={"Authorization": f"Bearer {TRACK_ONLY_KEY}"})
    assert response.status_code == 403
    assert response.json() == {
        "message": f"This API key does not have the '{permission}' permission needed for "
                   "this endpoint."
    }
    assert all(h in response.headers for h in RATE_HEADERS)


def test_track_only_key_may_track(sandbox: SandboxHandle) -> None:
    sandbox.reset()
    response = httpx.post(sandbox.base_url + "/users/track", json={"events": [EVENT]},
                          headers={"Authorization": f"Bearer {TRACK_ONLY_KEY}"})
    assert response.status_code == 201


@pytest.mark.parametrize(("method", "path"), SCIM_PATHS, ids=[f"{m} {p}" for m, p in SCIM_PATHS])
@pytest.mark.parametrize(
    ("headers", "status", "detail"),
    [
        ({}, 401, "Invalid SCIM token"),
        ({"Authorization": "Bearer sandbox-demo-key", "X-Request-Origin": "o"}, 401,
         "Invalid SCIM token"),
        ({"Authorization": "Bearer sandbox-scim-token"}, 400,
         "X-Request-Origin header is required"),
    ],
    ids=["no token", "api key is not a scim token", "no origin"],
)
def test_scim_auth(
    sandbox: SandboxHandle, method: str, path: str, headers: dict[str, str], status: int,
    detail: str,
) -> None:
    response = httpx.request(method, sandbox.base_url + path, headers=headers, json={})
    assert response.status_code == status
    assert response.json() == {"schemas": [SCIM_ERROR], "detail": detail, "status": status}


def test_rate_headers_on_success(client: httpx.Client) -> None:
    before = time.time()
    response = client.post("/users/track", json={"events": [EVENT]})
    after = time.time()
    assert response.headers["x-ratelimit-limit"] == "3000"
    assert response.headers["x-ratelimit-remaining"] == "2999"
    reset = int(response.headers["x-ratelimit-reset"])
    # the end of the 3 s window the request was counted in, some time between before and after
    assert reset % 3 == 0 and before < reset <= after + 3


@pytest.mark.parametrize(
    ("path", "limit"),
    [("/users/delete", "20000"), ("/users/merge", "20000"), ("/users/identify", "20000"),
     ("/users/alias/update", "20000"), ("/subscription/status/set", "5000"),
     ("/campaigns/trigger/schedule/create", "250000"),
     ("/cdi/integrations/abc/job_sync_status", "100"),
     ("/preference_center/v1/list", "1000"), ("/preference_center/v1/pc", "10")],
)
def test_default_group_limits(client: httpx.Client, path: str, limit: str) -> None:
    method = "GET" if path.startswith(("/cdi", "/preference_center/v1/list")) else "POST"
    method = "PUT" if path == "/preference_center/v1/pc" else method
    response = client.request(method, path, json={})
    assert response.headers["x-ratelimit-limit"] == limit


@pytest.fixture(scope="module")
def limited() -> Iterator[SandboxHandle]:
    settings = SandboxSettings(rate_limits={"users_track": RateLimit(3, 86400),
                                            "identity": RateLimit(2, 86400)})
    with run_sandbox(settings=settings) as handle:
        yield handle


def test_429_past_the_limit(limited: SandboxHandle) -> None:
    limited.reset()
    auth = {"Authorization": f"Bearer {limited.api_key}"}
    statuses = []
    for _ in range(5):
        response = httpx.post(limited.base_url + "/users/track", json={"events": [EVENT]},
                              headers=auth)
        statuses.append((response.status_code, response.headers["x-ratelimit-remaining"]))
    assert statuses == [(201, "2"), (201, "1"), (201, "0"), (429, "0"), (429, "0")]
    assert response.json() == {"message": "Rate limit exceeded"}
    assert httpx.get(limited.control_url + "/counters").json()["events"] == 3


def test_identity_group_is_shared(limited: SandboxHandle) -> None:
    limited.reset()
    auth = {"Authorization": f"Bearer {limited.api_key}"}
    body = {"external_ids": ["x"]}
    codes = [httpx.post(limited.base_url + p, json=body, headers=auth).status_code
             for p in ("/users/delete", "/users/delete", "/users/identify")]
    assert codes == [201, 201, 429]


def test_auth_failures_do_not_use_the_budget(limited: SandboxHandle) -> None:
    limited.reset()
    for _ in range(4):
        httpx.post(limited.base_url + "/users/track", json={})
    response = httpx.post(limited.base_url + "/users/track", json={"events": [EVENT]},
                          headers={"Authorization": f"Bearer {limited.api_key}"})
    assert response.status_code == 201


# ---- body checks -----------------------------------------------------------------------------

PARSE = "Error while parsing request body..."
UNSUPPORTED = "Unsupported Media Type: send 'Content-Type: application/json'"


@pytest.mark.parametrize(
    ("content", "ctype", "status", "body"),
    [
        (b'{"events": [', "application/json", 400, {"message": PARSE, "errors": [PARSE]}),
        (b"", "application/json", 400, {"message": PARSE, "errors": [PARSE]}),
        (b'{"events": []}', None, 415, {"message": UNSUPPORTED}),
        (b'{"events": []}', "text/plain", 415, {"message": UNSUPPORTED}),
    ],
    ids=["truncated json", "empty body", "no content type", "text/plain"],
)
@pytest.mark.parametrize("path", ["/users/track", "/users/merge", "/subscription/status/set"])
def test_body_rejections(
    client: httpx.Client, path: str, content: bytes, ctype: str | None, status: int,
    body: dict[str, Any],
) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    response = client.post(path, content=content, headers=headers)
    assert (response.status_code, response.json()) == (status, body)
    assert all(h in response.headers for h in RATE_HEADERS)


def test_content_type_with_charset_is_json(client: httpx.Client) -> None:
    content = b'{"events": [%s]}' % httpx.Request("POST", "/", json=EVENT).content
    response = client.post("/users/track", content=content,
                           headers={"Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 201


def _body_of_size(size: int) -> bytes:
    head, tail = b'{"attributes": [{"external_id": "big", "blob": "', b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_4_mb_is_accepted(client: httpx.Client) -> None:
    body = _body_of_size(4 * 1024 * 1024)
    response = client.post("/users/track", content=body,
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 201


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_over_4_mb_is_413(client: httpx.Client, chunked: bool) -> None:
    body = _body_of_size(4 * 1024 * 1024 + 1)
    content: Any = iter([body[i:i + 65536] for i in range(0, len(body), 65536)]) if chunked \
        else body
    response = client.post("/users/track", content=content,
                           headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()) == (413, {"message": "Request Entity Too Large"})


# ---- object-limit modes ----------------------------------------------------------------------


@pytest.fixture(scope="module", params=["total75", "per_array75", "total50"])
def mode_sandbox(request: pytest.FixtureRequest) -> Iterator[tuple[str, SandboxHandle]]:
    with run_sandbox(settings=SandboxSettings(limit_mode=request.param)) as handle:
        yield request.param, handle


LIMIT_CASES = {  # (events, purchases) → accepted? per mode
    (75, 0): {"total75": True, "per_array75": True, "total50": False},
    (76, 0): {"total75": False, "per_array75": False, "total50": False},
    (50, 0): {"total75": True, "per_array75": True, "total50": True},
    (51, 0): {"total75": True, "per_array75": True, "total50": False},
    (40, 36): {"total75": False, "per_array75": True, "total50": False},
    (75, 75): {"total75": False, "per_array75": True, "total50": False},
}


@pytest.mark.parametrize("counts", list(LIMIT_CASES), ids=[f"{e}+{p}" for e, p in LIMIT_CASES])
def test_object_limit_modes(
    mode_sandbox: tuple[str, SandboxHandle], counts: tuple[int, int]
) -> None:
    mode, handle = mode_sandbox
    purchase = {"external_id": "u", "product_id": "p", "currency": "USD", "price": 1,
                "time": "2024-05-01T12:00:00Z"}
    body = {"events": [EVENT] * counts[0], "purchases": [purchase] * counts[1]}
    response = httpx.post(handle.base_url + "/users/track", json=body,
                          headers={"Authorization": f"Bearer {handle.api_key}"})
    if LIMIT_CASES[counts][mode]:
        assert response.status_code == 201
    else:
        assert (response.status_code, response.json()) == (
            400, {"message": "Max Input Length Exceeded", "errors": ["Max Input Length Exceeded"]})


# ---- lean mode -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lean() -> Iterator[SandboxHandle]:
    with run_sandbox(lean=True) as handle:
        yield handle


def test_lean_counts_without_store(lean: SandboxHandle) -> None:
    lean.reset()
    auth = {"Authorization": f"Bearer {lean.api_key}"}
    body = {"attributes": [{"external_id": "a", "x": 1, "y": 2}], "events": [EVENT, EVENT],
            "purchases": [{"external_id": "a", "product_id": "p"}]}
    response = httpx.post(lean.base_url + "/users/track", json=body, headers=auth)
    assert (response.status_code, response.json()) == (201, {
        "message": "success", "attributes_processed": 1, "events_processed": 2,
        "purchases_processed": 1})
    counters = httpx.get(lean.control_url + "/counters").json()
    assert counters == {"requests": {"/users/track": 1}, "events": 2, "purchases": 1,
                        "events_by_user": {"u1": {"played": 2}}, "attributes_processed": 1,
                        "data_points": 5, "skipped_update_existing_only": 0,
                        "data_points_by_key": {"attributes": {"x": 1, "y": 1},
                                               "events": {"played": 2},
                                               "purchases": {"p": 1}}}
    assert httpx.get(lean.control_url + "/profiles").json() == {"profiles": []}
    assert "body" not in httpx.get(lean.control_url + "/requests").json()["requests"][0]


@pytest.mark.parametrize(
    ("kwargs", "status", "body"),
    [
        ({"json": {"events": [EVENT] * 76}}, 400,
         {"message": "Max Input Length Exceeded", "errors": ["Max Input Length Exceeded"]}),
        ({"content": b"{", "headers": {"Content-Type": "application/json"}}, 400,
         {"message": PARSE, "errors": [PARSE]}),
        ({"content": b"{}", "headers": {"Content-Type": "text/plain"}}, 415,
         {"message": UNSUPPORTED}),
        ({"json": {}}, 400, {"message": "Valid data must be provided in the 'attributes', "
                                        "'events', or 'purchases' fields.", "errors": []}),
    ],
    ids=["76 objects", "bad json", "content type", "no data"],
)
def test_lean_shape_limits(
    lean: SandboxHandle, kwargs: dict[str, Any], status: int, body: dict[str, Any]
) -> None:
    headers = {"Authorization": f"Bearer {lean.api_key}", **kwargs.pop("headers", {})}
    response = httpx.post(lean.base_url + "/users/track", headers=headers, **kwargs)
    assert (response.status_code, response.json()) == (status, body)


def test_lean_auth(lean: SandboxHandle) -> None:
    response = httpx.post(lean.base_url + "/users/track", json={"events": [EVENT]})
    assert (response.status_code, response.json()) == (401, {"message": "Invalid API Key"})
