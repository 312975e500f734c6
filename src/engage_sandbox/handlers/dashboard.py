"""Read-mostly dashboard endpoints: custom attributes and integration sync history, and the
routes of the whole dashboard (these, `preference_centers` and `translations`).

Contract choice where the interface says "not shown" (see also the module docstrings of
`paging`, `preference_centers`, `translations`, `messaging` and `scim`): `GET
/custom_attributes` pages like job sync status (50 a page, sorted by name, case-folded then
exact); its bad cursor is `400 {"message": "Invalid cursor"}`.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engage_sandbox.handlers.paging import link_header, paged
from engage_sandbox.handlers.preference_centers import (
    list_preference_centers,
    put_preference_center,
)
from engage_sandbox.handlers.translations import campaign_translation, canvas_translations
from engage_sandbox.state.dashboard_seed import seed_of

ATTRIBUTES_PER_PAGE = 50
SYNCS_PER_PAGE = 10


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
    page = paged(request, "custom_attributes", len(records), ATTRIBUTES_PER_PAGE)
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
    page = paged(request, scope, len(syncs), SYNCS_PER_PAGE)
    if page is None:
        return _message("Invalid cursor")
    results = [s.model_dump(mode="json") for s in syncs[page.start : page.stop]]
    return _json({"results": results, "message": "success"}, link=link_header(request, page, scope))


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
