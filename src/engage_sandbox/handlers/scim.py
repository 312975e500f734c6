"""SCIM 2.0 dashboard users: create, read, filter by userName, update, delete.

The core gate has already checked the SCIM token and `X-Request-Origin` (and the JSON body of
POST/PUT) before these handlers run.

Invariants:
- `userName` is unique, compared case-insensitively (it is an email address), and never
  changes after create;
- every error body is `{"schemas": [ERROR_SCHEMA], "detail": str, "status": int}` with
  `status` equal to the HTTP status.

Contract choices where the interface says "not shown":
- create answers 201, read / filter / update 200, delete 204 with an empty body;
- `lastSignInAt` is null for a user who never signed in (seeded users may carry one);
- any non-empty `department` string and any permission strings are accepted;
  `permissions.companyPermissions` and `permissions.appGroup` default to empty arrays;
- `appGroupId` / `teamId` are derived from the names (uuid5), stable across users;
- `GET /scim/v2/Users` without `filter` lists every user; a filter other than
  `userName eq "<value>"` is 400; the quoted value may itself be percent-encoded;
- PUT on an unknown id is 404 before the body is validated; a PUT `userName` equal to the
  current one is allowed, a different one is 400; unknown top-level keys are 400.
- seed section `scim_users`: a list of user objects as in a create request (`schemas` may be
  left out), optionally with `id` and `lastSignInAt`.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import unquote

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"

_FILTER = re.compile(r'^\s*userName\s+eq\s+"(?P<value>[^"]*)"\s*$', re.IGNORECASE)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_ID_NAMESPACE = uuid.UUID("6f1d1d3e-5c2b-4e0e-9a52-2f1a7b0c9e11")


class ScimError(Exception):
    """A SCIM error to answer with `status` and `detail`."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def error_body(status: int, detail: str) -> dict[str, Any]:
    """The SCIM error body for `status` and `detail`: exactly the spec's three keys."""
    return {"schemas": [ERROR_SCHEMA], "detail": detail, "status": status}


def _json(body: Any, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _error(exc: ScimError) -> Response:
    return _json(error_body(exc.status, exc.detail), exc.status)


# ---------------------------------------------------------------- validation (pure)


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ScimError(400, f"{where} must be an array of strings")
    return list(value)


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ScimError(400, f"{where} is required and must be a non-empty string")
    return value


def _team(team: Any, where: str) -> dict[str, Any]:
    if not isinstance(team, dict):
        raise ScimError(400, f"{where} must be an object")
    name = _string(team.get("teamName"), f"{where}.teamName")
    return {
        "teamId": str(uuid.uuid5(_ID_NAMESPACE, f"team:{name}")),
        "teamName": name,
        "teamPermissions": _strings(team.get("teamPermissions", []), f"{where}.teamPermissions"),
    }


def _app_group(group: Any, where: str) -> dict[str, Any]:
    if not isinstance(group, dict):
        raise ScimError(400, f"{where} must be an object")
    name = _string(group.get("appGroupName"), f"{where}.appGroupName")
    teams = group.get("team", [])
    sets = group.get("appGroupPermissionSets", [])
    if not isinstance(teams, list) or not isinstance(sets, list):
        raise ScimError(400, f"{where}.team and appGroupPermissionSets must be arrays")
    return {
        "appGroupId": str(uuid.uuid5(_ID_NAMESPACE, f"app_group:{name}")),
        "appGroupName": name,
        "appGroupPermissions": _strings(
            group.get("appGroupPermissions", []), f"{where}.appGroupPermissions"
        ),
        "team": [_team(t, f"{where}.team[{i}]") for i, t in enumerate(teams)],
        "appGroupPermissionSets": [
            {
                "appGroupPermissionSetName": _string(
                    s.get("appGroupPermissionSetName") if isinstance(s, dict) else None,
                    f"{where}.appGroupPermissionSets[{i}].appGroupPermissionSetName",
                )
            }
            for i, s in enumerate(sets)
        ],
    }


def check_permissions(value: Any) -> dict[str, Any]:
    """A permissions object in its response form; raises ScimError(400) when malformed."""
    if not isinstance(value, dict):
        raise ScimError(400, "permissions is required and must be an object")
    groups = value.get("appGroup", [])
    if not isinstance(groups, list):
        raise ScimError(400, "permissions.appGroup must be an array")
    return {
        "companyPermissions": _strings(
            value.get("companyPermissions", []), "permissions.companyPermissions"
        ),
        "appGroup": [_app_group(g, f"permissions.appGroup[{i}]") for i, g in enumerate(groups)],
    }


def check_user(body: Any, *, creating: bool) -> dict[str, Any]:
    """The stored fields of a valid create (or update) body; raises ScimError(400)."""
    if not isinstance(body, dict):
        raise ScimError(400, "request body must be a JSON object")
    allowed = {"schemas", "userName", "name", "department", "permissions"}
    unknown = set(body) - allowed
    if unknown:
        raise ScimError(400, f"unsupported attribute(s): {', '.join(sorted(unknown))}")
    schemas = body.get("schemas")
    if not isinstance(schemas, list) or USER_SCHEMA not in schemas:
        raise ScimError(400, f"schemas is required and must contain {USER_SCHEMA}")
    fields: dict[str, Any] = {}
    if creating:
        user_name = _string(body.get("userName"), "userName")
        if not _EMAIL.match(user_name):
            raise ScimError(400, "userName must be an email address")
        fields["userName"] = user_name
    name = body.get("name")
    if not isinstance(name, dict):
        raise ScimError(400, "name is required and must be an object")
    fields["name"] = {
        "givenName": _string(name.get("givenName"), "name.givenName"),
        "familyName": _string(name.get("familyName"), "name.familyName"),
    }
    fields["department"] = _string(body.get("department"), "department")
    fields["permissions"] = check_permissions(body.get("permissions"))
    return fields


def parse_filter(text: str) -> str:
    """The email of a `userName eq "<email>"` filter (percent-decoded); ScimError otherwise."""
    match = _FILTER.match(text)
    if match is None:
        match = _FILTER.match(unquote(text))
    if match is None:
        raise ScimError(400, 'filter must be of the form userName eq "<email>"')
    return unquote(match.group("value"))


# ---------------------------------------------------------------- the directory


class Directory:
    """Dashboard users by resource id, with a case-insensitive userName index."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, Any]] = {}

    def by_name(self, user_name: str) -> dict[str, Any] | None:
        """The user with this userName (case-insensitive), or None."""
        wanted = user_name.casefold()
        return next((u for u in self._users.values() if u["userName"].casefold() == wanted), None)

    def get(self, user_id: str) -> dict[str, Any]:
        """The user with this id; raises ScimError(404, 'User not found')."""
        user = self._users.get(user_id)
        if user is None:
            raise ScimError(404, "User not found")
        return user

    def create(self, fields: dict[str, Any], user_id: str | None = None) -> dict[str, Any]:
        """Store a new user; raises ScimError(409) when its userName is taken."""
        if self.by_name(fields["userName"]) is not None:
            raise ScimError(409, "User already exists in the database.")
        user = {
            "schemas": [USER_SCHEMA],
            "id": user_id or str(uuid.uuid4()),
            "userName": fields["userName"],
            "name": fields["name"],
            "department": fields["department"],
            "lastSignInAt": fields.get("lastSignInAt"),
            "permissions": fields["permissions"],
        }
        self._users[user["id"]] = user
        return user

    def delete(self, user_id: str) -> None:
        """Remove the user; raises ScimError(404) when unknown."""
        self.get(user_id)
        del self._users[user_id]

    def all(self) -> list[dict[str, Any]]:
        """Every user, by userName."""
        return sorted(self._users.values(), key=lambda u: u["userName"].casefold())


def _seeded(raw: Any) -> Directory:
    directory = Directory()
    for i, entry in enumerate(raw or []):
        try:
            body = {k: v for k, v in entry.items() if k not in ("id", "lastSignInAt")}
            fields = check_user({"schemas": [USER_SCHEMA], **body}, creating=True)
        except (ScimError, AttributeError) as exc:
            raise ValueError(f"seed scim_users[{i}]: {exc}") from exc
        fields["lastSignInAt"] = entry.get("lastSignInAt")
        directory.create(fields, user_id=entry.get("id"))
    return directory


def directory_of(app: Any) -> Directory:
    """The app's SCIM directory, built from the seed's `scim_users` on first use and reset."""
    sandbox = app.state.sandbox
    directory = sandbox.extra.get("scim_directory")
    if not isinstance(directory, Directory):
        directory = _seeded(sandbox.seed.section("scim_users"))
        sandbox.extra["scim_directory"] = directory
    return directory


# ---------------------------------------------------------------- handlers


async def users(request: Request) -> Response:
    """POST /scim/v2/Users (create, 201) and GET /scim/v2/Users[?filter=...] (list, 200)."""
    directory = directory_of(request.app)
    try:
        if request.method == "POST":
            user = directory.create(check_user(await request.json(), creating=True))
            return _json(user, 201)
        text = request.query_params.get("filter")
        if text is None:
            found = directory.all()
        else:
            hit = directory.by_name(parse_filter(text))
            found = [] if hit is None else [hit]
    except ScimError as exc:
        return _error(exc)
    return _json({"schemas": [LIST_SCHEMA], "totalResults": len(found), "Resources": found}, 200)


async def user(request: Request) -> Response:
    """GET, PUT and DELETE /scim/v2/Users/{id}; 404 `User not found` for an unknown id."""
    directory = directory_of(request.app)
    user_id = request.path_params["user_id"]
    try:
        current = directory.get(user_id)
        if request.method == "DELETE":
            directory.delete(user_id)
            return Response(status_code=204)
        if request.method == "PUT":
            body = await request.json()
            fields = check_user(body, creating=False)
            if "userName" in body and body["userName"] != current["userName"]:
                raise ScimError(400, "userName cannot be changed")
            current.update(fields)
    except ScimError as exc:
        return _error(exc)
    return _json(current, 200)


def routes() -> list[Route]:
    """The SCIM user endpoints, for the sandbox app to mount."""
    return [
        Route("/scim/v2/Users", users, methods=["GET", "POST"]),
        Route("/scim/v2/Users/{user_id}", user, methods=["GET", "PUT", "DELETE"]),
    ]
