"""Contract tests over HTTP: custom attributes, job sync status, preference centers,
translations. Table-driven from the interface spec; ids are those of the demo seed."""

from __future__ import annotations

import base64
import re
from datetime import datetime
from typing import Any

import httpx
import pytest

from engage_sandbox.state.dashboard_seed import DashboardSeedError, parse_dashboard
from engage_sandbox.state.settings import SandboxSettings
from engage_sandbox.web.server import run_sandbox
from tests.sandbox.seeded_sandbox import (
    TRACK_ONLY_KEY,
    _clients,
    api,
    control,
    demo_seed,
    s2_sandbox,
)

__all__ = ["_clients", "api", "control", "s2_sandbox"]

SYNC_KEYS = {
    "job_status",
    "sync_start_time",
    "sync_finish_time",
    "last_timestamp_synced",
    "rows_synced",
    "rows_failed_with_errors",
}
ATTRIBUTE_KEYS = {"array_length", "data_type", "description", "name", "status", "tag_names"}
_LINK = re.compile(r'<([^>]+)>; rel="(prev|next)"')


def links(response: httpx.Response) -> dict[str, str]:
    """rel → URL of the response's `Link` header ({} when absent)."""
    header = response.headers.get("link")
    if header is None:
        return {}
    parsed = {rel: url for url, rel in _LINK.findall(header)}
    assert parsed, f"unparseable Link header {header!r}"
    assert ", ".join(f'<{u}>; rel="{r}"' for r, u in parsed.items()) == header
    return parsed


# ---------------------------------------------------------------- custom attributes


def test_custom_attributes_pages_of_50_alphabetical_with_link(api: httpx.Client) -> None:
    first = api.get("/custom_attributes")
    assert first.status_code == 200
    assert first.json()["message"] == "success"
    page1 = first.json()["attributes"]
    assert len(page1) == 50
    assert all(set(a) == ATTRIBUTE_KEYS for a in page1)
    assert set(links(first)) == {"next"}

    second = api.get(links(first)["next"])
    assert second.status_code == 200
    page2 = second.json()["attributes"]
    assert len(page2) == 12
    assert set(links(second)) == {"prev"}
    names = [a["name"] for a in page1 + page2]
    assert names == sorted(names, key=lambda n: (n.casefold(), n))
    assert len(set(names)) == 62

    back = api.get(links(second)["prev"])
    assert back.json()["attributes"] == page1


def test_custom_attribute_record_is_the_seeded_definition(api: httpx.Client) -> None:
    records = api.get("/custom_attributes").json()["attributes"]
    by_name = {r["name"]: r for r in records}
    assert by_name["coupon_codes"] == {
        "array_length": 25,
        "data_type": "Array",
        "description": "Coupon codes",
        "name": "coupon_codes",
        "status": "Active",
        "tag_names": ["demo"],
    }


@pytest.mark.parametrize("cursor", ["%%%", "bm90LWEtY3Vyc29y", "Y3VzdG9tX2F0dHJpYnV0ZXMKOTk5"])
def test_custom_attributes_invalid_cursor(api: httpx.Client, cursor: str) -> None:
    response = api.get("/custom_attributes", params={"cursor": cursor})
    assert (response.status_code, response.json()) == (400, {"message": "Invalid cursor"})


# ---------------------------------------------------------------- job sync status

SYNC_CASES = [
    ("demo-new-sync", 0, [0]),
    ("demo-purchases-sync", 10, [10]),
    ("demo-events-sync", 11, [10, 1]),
    ("demo-attributes-sync", 25, [10, 10, 5]),
]


def _sync_url(integration_id: str) -> str:
    return f"/cdi/integrations/{integration_id}/job_sync_status"


@pytest.mark.parametrize(("integration_id", "total", "page_sizes"), SYNC_CASES)
def test_job_sync_status_paging_and_link_header(
    api: httpx.Client, integration_id: str, total: int, page_sizes: list[int]
) -> None:
    response = api.get(_sync_url(integration_id))
    pages = [response]
    while "next" in links(response):
        response = api.get(links(response)["next"])
        pages.append(response)
    assert [len(p.json()["results"]) for p in pages] == page_sizes
    for number, page in enumerate(pages):
        assert page.status_code == 200
        assert page.json()["message"] == "success"
        rels = set(links(page))
        if total <= 10:
            assert "link" not in page.headers
        else:
            expected = {"prev"} if number else set()
            expected |= {"next"} if number < len(pages) - 1 else set()
            assert rels == expected
    results = [r for p in pages for r in p.json()["results"]]
    assert len(results) == total
    assert all(set(r) == SYNC_KEYS for r in results)
    starts = [datetime.fromisoformat(r["sync_start_time"].replace("Z", "+00:00")) for r in results]
    assert starts == sorted(starts, reverse=True)
    assert len(set(starts)) == total


def test_job_sync_status_prev_link_returns_the_earlier_page(api: httpx.Client) -> None:
    first = api.get(_sync_url("demo-attributes-sync"))
    second = api.get(links(first)["next"])
    assert second.json()["results"] != first.json()["results"]
    assert api.get(links(second)["prev"]).json()["results"] == first.json()["results"]
    assert links(second)["next"].startswith(str(api.base_url).rstrip("/"))


def test_job_sync_status_newest_first_record_shape(api: httpx.Client) -> None:
    newest = api.get(_sync_url("demo-attributes-sync")).json()["results"][0]
    assert newest["job_status"] == "running"
    assert newest["sync_finish_time"] is None
    assert newest["sync_start_time"] == "2024-05-07T00:00:00Z"


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("integration_id", "cursor"),
    [
        ("demo-attributes-sync", "not a cursor!"),
        ("demo-attributes-sync", ""),
        ("demo-attributes-sync", _cursor("cdi:demo-attributes-sync\n25")),
        ("demo-attributes-sync", _cursor("cdi:demo-attributes-sync\n-1")),
        ("demo-attributes-sync", _cursor("cdi:demo-events-sync\n10")),
        ("demo-events-sync", _cursor("custom_attributes\n10")),
        ("demo-new-sync", _cursor("cdi:demo-new-sync\n10")),
    ],
)
def test_job_sync_status_invalid_cursor(
    api: httpx.Client, integration_id: str, cursor: str
) -> None:
    response = api.get(_sync_url(integration_id), params={"cursor": cursor})
    assert (response.status_code, response.json()) == (400, {"message": "Invalid cursor"})


@pytest.mark.parametrize("params", [{}, {"cursor": "whatever"}])
def test_job_sync_status_invalid_integration(api: httpx.Client, params: dict[str, str]) -> None:
    response = api.get(_sync_url("no-such-integration"), params=params)
    assert (response.status_code, response.json()) == (400, {"message": "Invalid integration ID"})


# ---------------------------------------------------------------- preference centers

PAGE = "<html><body>prefs</body></html>"
CONFIRM = "<html><body>saved</body></html>"
VALID_CENTER = {
    "name": "My center",
    "preference_center_title": "Pick",
    "preference_center_page_html": PAGE,
    "confirmation_page_html": CONFIRM,
    "state": "draft",
    "options": {"meta-viewport-content": "width=device-width"},
}


def test_preference_center_create_then_update_then_list(api: httpx.Client) -> None:
    created = api.put("/preference_center/v1/my-center", json=VALID_CENTER)
    assert created.status_code == 201
    body = created.json()
    assert set(body) == {"preference_center_api_id", "created_at", "updated_at", "message"}
    assert body["message"] == "success"

    update = {"preference_center_page_html": PAGE, "confirmation_page_html": CONFIRM}
    updated = api.put("/preference_center/v1/my-center", json=update)
    assert updated.status_code == 200
    assert updated.json()["preference_center_api_id"] == body["preference_center_api_id"]
    assert updated.json()["created_at"] == body["created_at"]
    assert updated.json()["updated_at"] >= body["updated_at"]

    listed = api.get("/preference_center/v1/list")
    assert listed.status_code == 200
    assert listed.json() == {
        "preference_centers": [
            {
                "name": "My center",
                "preference_center_api_id": body["preference_center_api_id"],
                "created_at": body["created_at"],
                "updated_at": updated.json()["updated_at"],
            },
            {
                "name": "Newsletter preferences",
                "preference_center_api_id": "7a3c1e52-1b5e-4f4e-9a0e-6f0d2c8b9d11",
                "created_at": "2024-04-01T09:00:00+00:00",
                "updated_at": "2024-04-02T10:30:00+00:00",
            },
        ]
    }


def test_preference_center_update_of_seeded_center_keeps_its_id(api: httpx.Client) -> None:
    body = {"preference_center_page_html": PAGE, "confirmation_page_html": CONFIRM}
    response = api.put("/preference_center/v1/demo-newsletter", json=body)
    assert response.status_code == 200
    assert response.json()["preference_center_api_id"] == "7a3c1e52-1b5e-4f4e-9a0e-6f0d2c8b9d11"
    assert response.json()["created_at"] == "2024-04-01T09:00:00+00:00"


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VALID_CENTER.items() if k != key}


PREFERENCE_REJECTIONS = [
    ([VALID_CENTER], "request body must be a JSON object"),
    (
        _without("preference_center_page_html"),
        "preference_center_page_html is required and must be a non-empty string",
    ),
    (
        _without("confirmation_page_html"),
        "confirmation_page_html is required and must be a non-empty string",
    ),
    (_without("name"), "name is required when creating a preference center"),
    ({**VALID_CENTER, "name": 5}, "name must be a non-empty string"),
    ({**VALID_CENTER, "state": "live"}, "state must be 'active' or 'draft'"),
    ({**VALID_CENTER, "preference_center_title": 1}, "preference_center_title must be a string"),
    ({**VALID_CENTER, "options": []}, "options must be an object"),
    (
        {**VALID_CENTER, "options": {"meta-viewport-content": 1}},
        "options.meta-viewport-content must be a string",
    ),
    ({**VALID_CENTER, "colour": "red"}, "unknown field(s): colour"),
]


@pytest.mark.parametrize(("body", "message"), PREFERENCE_REJECTIONS)
def test_preference_center_rejections(api: httpx.Client, body: Any, message: str) -> None:
    response = api.put("/preference_center/v1/new-center", json=body)
    assert (response.status_code, response.json()) == (400, {"message": message})
    names = [c["name"] for c in api.get("/preference_center/v1/list").json()["preference_centers"]]
    assert names == ["Newsletter preferences"]


def test_preference_center_post_is_not_routed(api: httpx.Client) -> None:
    assert api.post("/preference_center/v1/x", json=VALID_CENTER).status_code == 405


def test_preference_center_update_rate_limit_is_10_per_minute() -> None:
    with (
        run_sandbox(settings=SandboxSettings()) as sandbox,
        httpx.Client(
            base_url=sandbox.base_url, headers={"Authorization": f"Bearer {sandbox.api_key}"}
        ) as client,
    ):
        codes = [
            client.put(f"/preference_center/v1/c{i}", json=VALID_CENTER).status_code
            for i in range(11)
        ]
    assert codes == [201] * 10 + [429]


# ---------------------------------------------------------------- translations

FR = {
    "locale": {"name": "fr-FR", "country": "FR", "language": "fr"},
    "translation_map": {"subject": "Votre résumé", "body": "Voici votre résumé de la semaine."},
}
CAMPAIGN_OK = {
    "campaign_id": "campaign-email-1",
    "message_variation_id": "variation-email-1",
    "locale_id": "locale-fr-fr",
}


def _campaign(**changes: str | None) -> dict[str, str]:
    params = {**CAMPAIGN_OK, **changes}
    return {k: v for k, v in params.items() if v is not None}


def _errors(*messages: str) -> dict[str, Any]:
    return {"errors": [{"message": m} for m in messages]}


CAMPAIGN_CASES = [
    (_campaign(), 200, {"translations": [FR]}),
    (_campaign(campaign_id=None), 400, _errors("INVALID_CAMPAIGN_ID")),
    (_campaign(message_variation_id=None), 400, _errors("INVALID_MESSAGE_VARIATION_ID")),
    (_campaign(locale_id=None), 400, _errors("INVALID_LOCALE_ID")),
    ({}, 400, _errors("INVALID_CAMPAIGN_ID", "INVALID_MESSAGE_VARIATION_ID", "INVALID_LOCALE_ID")),
    (_campaign(campaign_id="no-such-campaign"), 404, _errors("Campaign not found")),
    (_campaign(message_variation_id="nope"), 400, _errors("INVALID_MESSAGE_VARIATION_ID")),
    (_campaign(message_variation_id="variation-push-1"), 400, _errors("INVALID_CAMPAIGN_ID")),
    (
        _campaign(message_variation_id="variation-email-removed"),
        400,
        _errors("MESSAGE_NOT_FOUND"),
    ),
    (
        _campaign(campaign_id="campaign-push-1", message_variation_id="variation-push-1"),
        400,
        _errors("UNSUPPORTED_CHANNEL"),
    ),
    (
        _campaign(message_variation_id="variation-email-monolingual"),
        400,
        _errors("MULTI_LANGUAGE_NOT_ENABLED_ON_MESSAGE"),
    ),
    (_campaign(locale_id="locale-ja-jp"), 400, _errors("LOCALE_NOT_FOUND")),
    (_campaign(locale_id="locale-es-es"), 400, _errors("INVALID_LOCALE_ID")),
]


@pytest.mark.parametrize(("params", "status", "body"), CAMPAIGN_CASES)
@pytest.mark.parametrize("path", ["/campaign/translations/", "/campaign/translations"])
def test_campaign_translations(
    api: httpx.Client, path: str, params: dict[str, str], status: int, body: Any
) -> None:
    response = api.get(path, params=params)
    assert (response.status_code, response.json()) == (status, body)


DE_STEP = {
    "locale": {"name": "de-DE", "country": "DE", "language": "de"},
    "translation_map": {"subject": "Willkommen!", "body": "Hallo und willkommen."},
}
FR_STEP = {
    "locale": {"name": "fr-FR", "country": "FR", "language": "fr"},
    "translation_map": {"subject": "Bienvenue !", "body": "Bonjour et bienvenue."},
}
CANVAS_CASES = [
    (
        {"canvas_id": "canvas-active-1", "step_id": "step-welcome-email"},
        200,
        {"translations": [DE_STEP, FR_STEP]},
    ),
    ({"step_id": "step-welcome-email"}, 400, _errors("canvas_id is required")),
    ({"canvas_id": "canvas-active-1"}, 400, _errors("step_id is required")),
    ({}, 400, _errors("canvas_id is required", "step_id is required")),
    ({"canvas_id": "nope", "step_id": "step-welcome-email"}, 404, _errors("Canvas not found")),
    ({"canvas_id": "canvas-active-1", "step_id": "nope"}, 400, _errors("MESSAGE_NOT_FOUND")),
    (
        {"canvas_id": "canvas-paused-1", "step_id": "step-welcome-email"},
        400,
        _errors("MESSAGE_NOT_FOUND"),
    ),
    (
        {"canvas_id": "canvas-active-1", "step_id": "step-removed-email"},
        400,
        _errors("MESSAGE_NOT_FOUND"),
    ),
    (
        {"canvas_id": "canvas-active-1", "step_id": "step-welcome-push"},
        400,
        _errors("UNSUPPORTED_CHANNEL"),
    ),
    (
        {"canvas_id": "canvas-active-1", "step_id": "step-untranslated-email"},
        400,
        _errors("MULTI_LANGUAGE_NOT_ENABLED_ON_MESSAGE"),
    ),
]


@pytest.mark.parametrize(("params", "status", "body"), CANVAS_CASES)
def test_canvas_translations(
    api: httpx.Client, params: dict[str, str], status: int, body: Any
) -> None:
    response = api.get("/canvases/translations", params=params)
    assert (response.status_code, response.json()) == (status, body)


def test_canvas_translations_sample_path_is_not_routed(api: httpx.Client) -> None:
    params = {"canvas_id": "canvas-active-1", "step_id": "step-welcome-email"}
    assert api.get("/canvas/translations", params=params).status_code == 404


def test_translations_when_workspace_multi_language_is_off() -> None:
    seed = {**demo_seed(), "multi_language_enabled": False}
    with (
        run_sandbox(seed=seed) as sandbox,
        httpx.Client(
            base_url=sandbox.base_url, headers={"Authorization": f"Bearer {sandbox.api_key}"}
        ) as client,
    ):
        campaign = client.get("/campaign/translations/", params=CAMPAIGN_OK)
        canvas = client.get(
            "/canvases/translations",
            params={"canvas_id": "canvas-active-1", "step_id": "step-welcome-email"},
        )
    expected = (400, _errors("MULTI_LANGUAGE_NOT_ENABLED"))
    assert (campaign.status_code, campaign.json()) == expected
    assert (canvas.status_code, canvas.json()) == expected


# ---------------------------------------------------------------- permissions

DASHBOARD_CALLS = [
    ("GET", "/custom_attributes", "custom_attributes.get"),
    ("GET", _sync_url("demo-events-sync"), "cdi.integration_job_status"),
    ("PUT", "/preference_center/v1/x", "preference_center.update"),
    ("GET", "/preference_center/v1/list", "preference_center.list"),
    ("GET", "/campaign/translations/", "campaigns.translations.get"),
    ("GET", "/canvases/translations", "canvas.translations.get"),
]


@pytest.mark.parametrize(("method", "path", "permission"), DASHBOARD_CALLS)
def test_dashboard_endpoints_need_their_permission(
    api: httpx.Client, control: httpx.Client, method: str, path: str, permission: str
) -> None:
    body = VALID_CENTER if method == "PUT" else None
    no_key = httpx.request(method, api.base_url.join(path), json=body)
    assert (no_key.status_code, no_key.json()) == (401, {"message": "Invalid API Key"})
    headers = {"Authorization": f"Bearer {TRACK_ONLY_KEY}"}
    weak = api.request(method, path, json=body, headers=headers)
    assert weak.status_code == 403
    assert permission in weak.json()["message"]


# ---------------------------------------------------------------- the seed sections


@pytest.mark.parametrize(
    ("sections", "problem"),
    [
        ({"canvases": [{"id": "c"}, {"id": "c"}]}, "duplicate id 'c'"),
        ({"canvases": [{"id": "c", "state": "sleeping"}]}, "'canvases.0.state'"),
        (
            {
                "integrations": [
                    {
                        "id": "i",
                        "syncs": [{"job_status": "success", "sync_start_time": "yesterday"}],
                    }
                ]
            },
            "'integrations.0.syncs.0.sync_start_time'",
        ),
        (
            {
                "campaigns": [
                    {
                        "id": "k",
                        "message_variations": [
                            {"id": "v", "translations": {"locale-xx": {"a": "b"}}}
                        ],
                    }
                ]
            },
            "translation locale 'locale-xx' is not declared",
        ),
        (
            {
                "campaigns": [{"id": "k", "message_variations": [{"id": "v"}]}],
                "canvases": [{"id": "c", "steps": [{"id": "v"}]}],
            },
            "duplicate id 'v'",
        ),
    ],
)
def test_bad_dashboard_seed_sections_are_named(sections: dict[str, Any], problem: str) -> None:
    with pytest.raises(DashboardSeedError, match=re.escape(problem)):
        parse_dashboard({**demo_seed(), **sections})
