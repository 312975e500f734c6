"""Read-mostly dashboard endpoints: custom attributes, sync history, preference centers,
translations.

Contract choices where the interface says "not shown" (see also the module docstrings of
`messaging` and `scim`):

- Cursors are opaque base64url tokens naming the list and an offset; a token that does not
  decode, names another list or points past the end is `400 Invalid cursor`.
- `Link` holds absolute URLs, `<url>; rel="prev", <url>; rel="next"`. `prev` is present when
  the page does not start at the first record (so never on a call without cursor), `next` when
  records follow; with no more than one page in total the header is absent.
- `GET /custom_attributes` pages like job sync status (50 a page, sorted by name, case-folded
  then exact); its bad cursor is `400 {"message": "Invalid cursor"}`.
- `PUT /preference_center/v1/{id}` creates (201) or updates (200). `name` is required on
  create and optional on update; `state` defaults to `active`; the default title is the
  name. Only PUT is routed (POST is 405). Errors are `400 {"message": ...}`.
- Translations take all their ids as query parameters; the Canvas path is
  `/canvases/translations` only. Error order and codes: see `_campaign_translation`.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sandbox.dashboard_seed import DashboardSeed, Message, PreferenceCenter, seed_of

ATTRIBUTES_PER_PAGE = 50
SYNCS_PER_PAGE = 10


# ---------------------------------------------------------------- cursors and paging


def encode_cursor(scope: str, offset: int) -> str:
    """An opaque cursor naming `scope` (the list being paged) and a record offset."""
    return base64.urlsafe_b64encode(f"{scope}\n{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str, scope: str) -> int:
    """The offset inside a cursor made for `scope`; raises ValueError on anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError("undecodable cursor") from exc
    cursor_scope, _, offset_text = raw.rpartition("\n")
    if cursor_scope != scope or not offset_text.isdigit():
        raise ValueError("cursor of another list")
    return int(offset_text)


@dataclass(frozen=True)
class Page:
    """One page of a list: the slice bounds and the offsets of its neighbours (or None)."""

    start: int
    stop: int
    prev: int | None
    next: int | None


def page_of(total: int, offset: int, size: int) -> Page:
    """The page of `size` records starting at `offset`; raises ValueError past the end.

    Offset 0 is always valid (an empty list has one empty page).
    """
    if offset < 0 or (offset > 0 and offset >= total):
        raise ValueError("offset out of range")
    stop = min(offset + size, total)
    prev = max(offset - size, 0) if offset > 0 else None
    return Page(offset, stop, prev, stop if stop < total else None)


def link_header(request: Request, page: Page, scope: str) -> str | None:
    """The `Link` header value for `page`, or None when it has no neighbours."""
    base = str(request.url.replace(query=""))
    links = []
    if page.prev is not None:
        links.append(f'<{base}?cursor={encode_cursor(scope, page.prev)}>; rel="prev"')
    if page.next is not None:
        links.append(f'<{base}?cursor={encode_cursor(scope, page.next)}>; rel="next"')
    return ", ".join(links) or None


def _paged(request: Request, scope: str, total: int, size: int) -> Page | None:
    """The page asked for by the request's `cursor`, or None when the cursor is invalid."""
    cursor = request.query_params.get("cursor")
    try:
        offset = 0 if cursor is None else decode_cursor(cursor, scope)
        return page_of(total, offset, size)
    except ValueError:
        return None


def _json(body: Any, status: int = 200, link: str | None = None) -> Response:
    headers = {"Link": link} if link else None
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def _message(text: str, status: int = 400) -> Response:
    return _json({"message": text}, status)


# ---------------------------------------------------------------- custom attributes


async def custom_attributes(request: Request) -> Response:
    """GET /custom_attributes: 50 definitions a page, alphabetical, `Link` to neighbours."""
    records = sorted(
        seed_of(request.app).custom_attributes, key=lambda a: (a.name.casefold(), a.name)
    )
    page = _paged(request, "custom_attributes", len(records), ATTRIBUTES_PER_PAGE)
    if page is None:
        return _message("Invalid cursor")
    body = {
        "message": "success",
        "attributes": [r.model_dump(mode="json") for r in records[page.start : page.stop]],
    }
    return _json(body, link=link_header(request, page, "custom_attributes"))


# ---------------------------------------------------------------- job sync status


async def job_sync_status(request: Request) -> Response:
    """GET /cdi/integrations/{integration_id}/job_sync_status: 10 records a page, newest first.

    Unknown integration → 400 `Invalid integration ID`; bad cursor → 400 `Invalid cursor`.
    """
    integration_id = request.path_params["integration_id"]
    integration = seed_of(request.app).integration(integration_id)
    if integration is None:
        return _message("Invalid integration ID")
    syncs = sorted(integration.syncs, key=lambda s: s.started(), reverse=True)
    scope = f"cdi:{integration_id}"
    page = _paged(request, scope, len(syncs), SYNCS_PER_PAGE)
    if page is None:
        return _message("Invalid cursor")
    results = [s.model_dump(mode="json") for s in syncs[page.start : page.stop]]
    return _json({"results": results, "message": "success"}, link=link_header(request, page, scope))


# ---------------------------------------------------------------- preference centers


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
        return _message(problem)
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
    return _json(reply, 201 if created else 200)


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
    return _json({"preference_centers": summaries})


# ---------------------------------------------------------------- translations


def _errors(status: int, *messages: str) -> Response:
    return _json({"errors": [{"message": m} for m in messages]}, status)


def _message_problem(message: Message) -> str | None:
    """The error code of a message that cannot be translated, or None."""
    if not message.has_message:
        return "MESSAGE_NOT_FOUND"
    if message.channel != "email":
        return "UNSUPPORTED_CHANNEL"
    if not message.multi_language:
        return "MULTI_LANGUAGE_NOT_ENABLED_ON_MESSAGE"
    return None


def _records(seed: DashboardSeed, message: Message, locale_ids: list[str]) -> list[Any]:
    records = []
    for locale_id in locale_ids:
        locale = seed.locale(locale_id)
        if locale is not None:
            records.append(
                {
                    "locale": {
                        "name": locale.name,
                        "country": locale.country,
                        "language": locale.language,
                    },
                    "translation_map": message.translations[locale_id],
                }
            )
    return records


async def campaign_translation(request: Request) -> Response:
    """GET /campaign/translations/?campaign_id=&message_variation_id=&locale_id=.

    Checks, in order: each parameter present (else its INVALID_* code), workspace
    multi-language on (MULTI_LANGUAGE_NOT_ENABLED), campaign known (404), variation known
    (INVALID_MESSAGE_VARIATION_ID) and in this campaign (INVALID_CAMPAIGN_ID), message present
    (MESSAGE_NOT_FOUND), email channel (UNSUPPORTED_CHANNEL), multi-language on the message
    (MULTI_LANGUAGE_NOT_ENABLED_ON_MESSAGE), locale in the workspace (LOCALE_NOT_FOUND),
    locale translated on the message (INVALID_LOCALE_ID). All but 404 are 400.
    """
    params = request.query_params
    missing = [
        code
        for key, code in (
            ("campaign_id", "INVALID_CAMPAIGN_ID"),
            ("message_variation_id", "INVALID_MESSAGE_VARIATION_ID"),
            ("locale_id", "INVALID_LOCALE_ID"),
        )
        if not params.get(key)
    ]
    if missing:
        return _errors(400, *missing)
    seed = seed_of(request.app)
    if not seed.translations.multi_language_enabled:
        return _errors(400, "MULTI_LANGUAGE_NOT_ENABLED")
    campaign = seed.campaign(params["campaign_id"])
    if campaign is None:
        return _errors(404, "Campaign not found")
    owner = seed.variation_owner(params["message_variation_id"])
    if owner is None:
        return _errors(400, "INVALID_MESSAGE_VARIATION_ID")
    if owner[0].id != campaign.id:
        return _errors(400, "INVALID_CAMPAIGN_ID")
    message = owner[1]
    problem = _message_problem(message)
    if problem is not None:
        return _errors(400, problem)
    locale_id = params["locale_id"]
    if seed.locale(locale_id) is None:
        return _errors(400, "LOCALE_NOT_FOUND")
    if locale_id not in message.translations:
        return _errors(400, "INVALID_LOCALE_ID")
    return _json({"translations": _records(seed, message, [locale_id])})


async def canvas_translations(request: Request) -> Response:
    """GET /canvases/translations?canvas_id=&step_id=: every translation of a Canvas step.

    Missing parameter → 400 with a plain message; workspace multi-language off →
    MULTI_LANGUAGE_NOT_ENABLED; unknown Canvas → 404; unknown step or removed message →
    MESSAGE_NOT_FOUND; then the channel and message checks of the campaign endpoint.
    """
    params = request.query_params
    missing = [f"{key} is required" for key in ("canvas_id", "step_id") if not params.get(key)]
    if missing:
        return _errors(400, *missing)
    seed = seed_of(request.app)
    if not seed.translations.multi_language_enabled:
        return _errors(400, "MULTI_LANGUAGE_NOT_ENABLED")
    canvas = seed.canvas(params["canvas_id"])
    if canvas is None:
        return _errors(404, "Canvas not found")
    step = next((s for s in canvas.steps if s.id == params["step_id"]), None)
    if step is None:
        return _errors(400, "MESSAGE_NOT_FOUND")
    problem = _message_problem(step)
    if problem is not None:
        return _errors(400, problem)
    return _json({"translations": _records(seed, step, sorted(step.translations))})


def routes() -> list[Route]:
    """The dashboard endpoints, for the sandbox app to mount."""
    return [
        Route("/custom_attributes", custom_attributes, methods=["GET"]),
        Route(
            "/cdi/integrations/{integration_id}/job_sync_status",
            job_sync_status,
            methods=["GET"],
        ),
        Route("/preference_center/v1/list", list_preference_centers, methods=["GET"]),
        Route("/preference_center/v1/{external_id}", put_preference_center, methods=["PUT"]),
        Route("/campaign/translations/", campaign_translation, methods=["GET"]),
        Route("/campaign/translations", campaign_translation, methods=["GET"]),
        Route("/canvases/translations", canvas_translations, methods=["GET"]),
    ]
