"""Preference centers: the seeded ones and those created by PUT, kept in the sandbox's
per-module state (back to the seeded ones on reset).

Contract choices where the interface says "not shown": `PUT /preference_center/v1/{id}`
creates (201) or updates (200). `name` is required on create and optional on update; `state`
defaults to `active`; the default title is the name. Only PUT is routed (POST is 405). Errors
are `400 {"message": ...}`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engage_sandbox.handlers.control import json_response
from engage_sandbox.state.dashboard_seed import PreferenceCenter, seed_of


class PreferenceCenters:
    """Preference centers by external id: the seeded ones, then those created by PUT."""

    def __init__(self, seeded: tuple[PreferenceCenter, ...]) -> None:
        self._by_id = {center.external_id: center for center in seeded}

    def get(self, external_id: str) -> PreferenceCenter | None:
        """The center with this external id, or None."""
        return self._by_id.get(external_id)

    def put(self, center: PreferenceCenter) -> None:
        """Create or replace the center under its external id."""
        self._by_id[center.external_id] = center

    def all(self) -> list[PreferenceCenter]:
        """Every center, by name then external id."""
        return sorted(self._by_id.values(), key=lambda c: (c.name.casefold(), c.external_id))


def centers_of(app: Any) -> PreferenceCenters:
    """The app's preference center store, created from the seed on first use and on reset."""
    extra = app.state.sandbox.extra
    centers = extra.get("preference_centers")
    if not isinstance(centers, PreferenceCenters):
        centers = PreferenceCenters(seed_of(app).preference_centers)
        extra["preference_centers"] = centers
    return centers


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def preference_center_problem(body: Any, existing: PreferenceCenter | None) -> str | None:
    """Why this PUT body is invalid (None when valid). `name` is required only on create."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    for key in ("preference_center_page_html", "confirmation_page_html"):
        if not isinstance(body.get(key), str) or not body[key]:
            return f"{key} is required and must be a non-empty string"
    name = body.get("name")
    if existing is None and name is None:
        return "name is required when creating a preference center"
    if name is not None and (not isinstance(name, str) or not name):
        return "name must be a non-empty string"
    title = body.get("preference_center_title")
    if title is not None and not isinstance(title, str):
        return "preference_center_title must be a string"
    if body.get("state") is not None and body["state"] not in ("active", "draft"):
        return "state must be 'active' or 'draft'"
    options = body.get("options")
    if options is not None:
        if not isinstance(options, dict):
            return "options must be an object"
        viewport = options.get("meta-viewport-content")
        if viewport is not None and not isinstance(viewport, str):
            return "options.meta-viewport-content must be a string"
    unknown = set(body) - {
        "name",
        "preference_center_title",
        "preference_center_page_html",
        "confirmation_page_html",
        "state",
        "options",
    }
    if unknown:
        return f"unknown field(s): {', '.join(sorted(unknown))}"
    return None


async def put_preference_center(request: Request) -> Response:
    """PUT /preference_center/v1/{id}: create (201) or update (200) a preference center."""
    external_id = request.path_params["external_id"]
    body = await request.json()  # the core gate has answered unparseable JSON already
    centers = centers_of(request.app)
    existing = centers.get(external_id)
    problem = preference_center_problem(body, existing)
    if problem is not None:
        return json_response({"message": problem}, 400)
    now = _now()
    html = body["preference_center_page_html"]
    viewport = (body.get("options") or {}).get("meta-viewport-content")
    if viewport is not None:
        html = f'<meta name="viewport" content="{viewport}">' + html
    created = existing is None
    if existing is None:
        existing = PreferenceCenter(
            external_id=external_id, name=body["name"], api_id=str(uuid.uuid4()), created_at=now
        )
    center = replace_center(existing, body, html, now)
    centers.put(center)
    reply = {
        "preference_center_api_id": center.api_id,
        "created_at": center.created_at,
        "updated_at": center.updated_at,
        "message": "success",
    }
    return json_response(reply, 201 if created else 200)


def replace_center(
    center: PreferenceCenter, body: dict[str, Any], html: str, now: str
) -> PreferenceCenter:
    """`center` with the fields of a valid PUT body applied and `updated_at` set to `now`."""
    name = body.get("name") or center.name
    return center.model_copy(
        update={
            "name": name,
            "title": body.get("preference_center_title") or center.title or name,
            "page_html": html,
            "confirmation_html": body["confirmation_page_html"],
            "state": body.get("state") or center.state,
            "updated_at": now,
        }
    )


async def list_preference_centers(request: Request) -> Response:
    """GET /preference_center/v1/list: a summary of every preference center."""
    summaries = [
        {
            "name": c.name,
            "preference_center_api_id": c.api_id,
            "created_at": c.created_at,
            "updated_at": c.updated_at,
        }
        for c in centers_of(request.app).all()
    ]
    return json_response({"preference_centers": summaries})
