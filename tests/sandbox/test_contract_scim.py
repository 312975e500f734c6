"""Contract tests over HTTP: the SCIM dashboard-user endpoints.

Error bodies are exactly `{"schemas": [ERROR], "detail", "status"}`; ids come from create or
the demo seed's one dashboard user."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.sandbox.seeded_sandbox import SCIM_TOKEN, _clients, api, s2_sandbox, scim

__all__ = ["_clients", "api", "s2_sandbox", "scim"]

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
SEEDED_ID = "5b0f1c7e-3a52-4c1e-8d4f-0e9a6b7c8d90"
SEEDED_EMAIL = "demo.admin@example.com"

NEW_USER = {
    "schemas": [USER_SCHEMA],
    "userName": "jane.doe@example.com",
    "name": {"givenName": "Jane", "familyName": "Doe"},
    "department": "finance",
    "permissions": {
        "companyPermissions": ["manage_company_settings"],
        "appGroup": [
            {
                "appGroupName": "Test Workspace",
                "appGroupPermissions": ["basic_access"],
                "team": [{"teamName": "Test Team", "teamPermissions": ["admin"]}],
                "appGroupPermissionSets": [{"appGroupPermissionSetName": "Marketers"}],
            }
        ],
    },
}


def error(status: int, detail: str) -> dict[str, Any]:
    return {"schemas": [ERROR_SCHEMA], "detail": detail, "status": status}


def create(scim: httpx.Client, body: Any = NEW_USER) -> httpx.Response:
    return scim.post("/scim/v2/Users", json=body)


def test_create_returns_the_user_with_generated_fields(scim: httpx.Client) -> None:
    response = create(scim)
    assert response.status_code == 201
    user = response.json()
    assert set(user) == {
        "schemas",
        "id",
        "userName",
        "name",
        "department",
        "lastSignInAt",
        "permissions",
    }
    assert user["schemas"] == [USER_SCHEMA]
    assert (user["userName"], user["name"], user["department"]) == (
        NEW_USER["userName"],
        NEW_USER["name"],
        "finance",
    )
    assert user["lastSignInAt"] is None
    [group] = user["permissions"]["appGroup"]
    assert group["appGroupId"] and group["team"][0]["teamId"]
    assert group["appGroupPermissionSets"] == [{"appGroupPermissionSetName": "Marketers"}]
    assert scim.get(f"/scim/v2/Users/{user['id']}").json() == user


@pytest.mark.parametrize("user_name", ["jane.doe@example.com", "JANE.DOE@example.com"])
def test_create_with_existing_email_is_409(scim: httpx.Client, user_name: str) -> None:
    assert create(scim).status_code == 201
    response = create(scim, {**NEW_USER, "userName": user_name})
    assert (response.status_code, response.json()) == (
        409,
        error(409, "User already exists in the database."),
    )


def test_seeded_user_is_found_by_id_and_by_email(scim: httpx.Client) -> None:
    by_id = scim.get(f"/scim/v2/Users/{SEEDED_ID}")
    assert by_id.status_code == 200
    assert by_id.json()["userName"] == SEEDED_EMAIL
    assert by_id.json()["lastSignInAt"] == "2024-05-01T08:00:00Z"
    found = scim.get("/scim/v2/Users", params={"filter": f'userName eq "{SEEDED_EMAIL}"'})
    assert found.status_code == 200
    assert found.json() == {
        "schemas": [LIST_SCHEMA],
        "totalResults": 1,
        "Resources": [by_id.json()],
    }


@pytest.mark.parametrize(
    ("query", "total"),
    [
        ('filter=userName eq "demo.admin@example.com"', 1),
        ("filter=userName%20eq%20%22demo.admin%40example.com%22", 1),
        ('filter=userName eq "demo.admin%40example.com"', 1),
        ('filter=USERNAME EQ "Demo.Admin@Example.com"', 1),
        ('filter=userName eq "nobody@example.com"', 0),
    ],
)
def test_filter_by_user_name(scim: httpx.Client, query: str, total: int) -> None:
    response = scim.get(f"/scim/v2/Users?{query}")
    assert response.status_code == 200
    body = response.json()
    assert (body["schemas"], body["totalResults"], len(body["Resources"])) == (
        [LIST_SCHEMA],
        total,
        total,
    )


@pytest.mark.parametrize("text", ['emails eq "a@b.c"', "userName eq a@b.c", 'userName sw "a"'])
def test_unsupported_filter_is_400(scim: httpx.Client, text: str) -> None:
    response = scim.get("/scim/v2/Users", params={"filter": text})
    assert (response.status_code, response.json()) == (
        400,
        error(400, 'filter must be of the form userName eq "<email>"'),
    )


def test_update_replaces_name_department_permissions(scim: httpx.Client) -> None:
    user = create(scim).json()
    change = {
        "schemas": [USER_SCHEMA],
        "userName": NEW_USER["userName"],
        "name": {"givenName": "Janet", "familyName": "Doe"},
        "department": "marketing",
        "permissions": {"companyPermissions": [], "appGroup": []},
    }
    response = scim.put(f"/scim/v2/Users/{user['id']}", json=change)
    assert response.status_code == 200
    updated = response.json()
    assert updated == {
        **user,
        "name": change["name"],
        "department": "marketing",
        "permissions": change["permissions"],
    }
    assert scim.get(f"/scim/v2/Users/{user['id']}").json() == updated


def test_update_cannot_change_user_name(scim: httpx.Client) -> None:
    user = create(scim).json()
    change = {k: v for k, v in NEW_USER.items()} | {"userName": "other@example.com"}
    response = scim.put(f"/scim/v2/Users/{user['id']}", json=change)
    assert (response.status_code, response.json()) == (
        400,
        error(400, "userName cannot be changed"),
    )


def test_delete_is_204_then_404(scim: httpx.Client) -> None:
    user = create(scim).json()
    deleted = scim.delete(f"/scim/v2/Users/{user['id']}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    again = scim.delete(f"/scim/v2/Users/{user['id']}")
    assert (again.status_code, again.json()) == (404, error(404, "User not found"))
    assert scim.get(f"/scim/v2/Users/{user['id']}").status_code == 404
    assert create(scim).status_code == 201  # the email is free again


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("GET", None),
        ("PUT", {k: v for k, v in NEW_USER.items() if k != "userName"}),
        ("DELETE", None),
    ],
)
def test_unknown_id_is_404(scim: httpx.Client, method: str, body: Any) -> None:
    response = scim.request(method, "/scim/v2/Users/no-such-id", json=body)
    assert (response.status_code, response.json()) == (404, error(404, "User not found"))


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in NEW_USER.items() if k != key}


CREATE_REJECTIONS = [
    ([NEW_USER], "request body must be a JSON object"),
    (_without("schemas"), f"schemas is required and must contain {USER_SCHEMA}"),
    ({**NEW_USER, "schemas": ["urn:x"]}, f"schemas is required and must contain {USER_SCHEMA}"),
    (_without("userName"), "userName is required and must be a non-empty string"),
    ({**NEW_USER, "userName": "not-an-email"}, "userName must be an email address"),
    (_without("name"), "name is required and must be an object"),
    (
        {**NEW_USER, "name": {"givenName": "J"}},
        "name.familyName is required and must be a non-empty string",
    ),
    (_without("department"), "department is required and must be a non-empty string"),
    (_without("permissions"), "permissions is required and must be an object"),
    ({**NEW_USER, "permissions": {"appGroup": {}}}, "permissions.appGroup must be an array"),
    (
        {**NEW_USER, "permissions": {"companyPermissions": [1]}},
        "permissions.companyPermissions must be an array of strings",
    ),
    (
        {**NEW_USER, "permissions": {"appGroup": [{"appGroupPermissions": []}]}},
        "permissions.appGroup[0].appGroupName is required and must be a non-empty string",
    ),
    ({**NEW_USER, "id": "mine"}, "unsupported attribute(s): id"),
]


@pytest.mark.parametrize(("body", "detail"), CREATE_REJECTIONS)
def test_create_rejections(scim: httpx.Client, body: Any, detail: str) -> None:
    response = create(scim, body)
    assert (response.status_code, response.json()) == (400, error(400, detail))
    assert scim.get("/scim/v2/Users").json()["totalResults"] == 1  # the seeded user only


def test_update_requires_its_fields(scim: httpx.Client) -> None:
    response = scim.put(f"/scim/v2/Users/{SEEDED_ID}", json=_without("department"))
    assert (response.status_code, response.json()) == (
        400,
        error(400, "department is required and must be a non-empty string"),
    )


def test_scim_credentials(s2_sandbox: Any, scim: httpx.Client) -> None:
    url = f"{s2_sandbox.base_url}/scim/v2/Users/{SEEDED_ID}"
    no_origin = httpx.get(url, headers={"Authorization": f"Bearer {SCIM_TOKEN}"})
    assert (no_origin.status_code, no_origin.json()) == (
        400,
        error(400, "X-Request-Origin header is required"),
    )
    api_key = httpx.get(
        url,
        headers={"Authorization": f"Bearer {s2_sandbox.api_key}", "X-Request-Origin": "x"},
    )
    assert (api_key.status_code, api_key.json()) == (401, error(401, "Invalid SCIM token"))
