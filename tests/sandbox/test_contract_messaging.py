"""Contract tests over HTTP: /canvas/trigger/send and /campaigns/trigger/schedule/create.

Every rejection is checked for its exact status and body, and for having no side effect (no
dispatch logged, no profile written). Ids are those of the demo seed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.sandbox.seeded_sandbox import (
    TRACK_ONLY_KEY,
    _clients,
    api,
    control,
    dispatches,
    s2_sandbox,
    track_users,
)

__all__ = ["_clients", "api", "control", "s2_sandbox"]

ALIAS = {"alias_name": "anon-1", "alias_label": "device"}
PAUSED_NOTICE = (
    "The Canvas is paused. Resume the Canvas to ensure trigger requests will take effect."
)
STOPPED_NOTICE = (
    "The Canvas is stopped. Resume the Canvas to ensure trigger requests will take effect."
)
ARCHIVED_NOTICE = (
    "The Canvas is archived. Unarchive the Canvas to ensure trigger requests will take effect."
)


def profile(control: httpx.Client, **query: str) -> dict[str, Any] | None:
    """The control plane's view of one profile, or None."""
    response = control.get("/profiles", params=query)
    return None if response.status_code == 404 else response.json()


def send(api: httpx.Client, body: Any) -> httpx.Response:
    return api.post("/canvas/trigger/send", json=body)


def _sent_ids(dispatch: dict[str, Any]) -> list[str]:
    return [str(s["external_id"]) for s in dispatch["sent"]]


def attributes(control: httpx.Client, external_id: str) -> dict[str, Any]:
    """The custom attributes of an existing profile."""
    found = profile(control, external_id=external_id)
    assert found is not None, external_id
    return dict(found["attributes"])


# ---------------------------------------------------------------- Canvas: accepted


def test_canvas_send_to_known_users_with_merged_properties(
    api: httpx.Client, control: httpx.Client
) -> None:
    track_users(api, {"external_id": "u1", "tier": "gold"}, {"external_id": "u2"})
    response = send(
        api,
        {
            "canvas_id": "canvas-active-1",
            "canvas_entry_properties": {"greeting": "hi", "coupon": "A"},
            "recipients": [
                {"external_user_id": "u1", "canvas_entry_properties": {"coupon": "B"}},
                {"external_user_id": "u2"},
            ],
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"message", "dispatch_id"}
    assert body["message"] == "success"
    [dispatch] = dispatches(control)
    assert dispatch["dispatch_id"] == body["dispatch_id"]
    assert (dispatch["kind"], dispatch["target_id"]) == ("canvas", "canvas-active-1")
    assert [(s["external_id"], s["properties"]) for s in dispatch["sent"]] == [
        ("u1", {"greeting": "hi", "coupon": "B"}),
        ("u2", {"greeting": "hi", "coupon": "A"}),
    ]
    assert dispatch["skipped"] == []


def test_canvas_send_unknown_user_is_skipped_by_default(
    api: httpx.Client, control: httpx.Client
) -> None:
    response = send(
        api,
        {
            "canvas_id": "canvas-active-1",
            "recipients": [{"external_user_id": "ghost", "attributes": {"tier": "x"}}],
        },
    )
    assert response.status_code == 201
    [dispatch] = dispatches(control)
    assert dispatch["sent"] == []
    assert dispatch["skipped"] == [{"external_user_id": "ghost", "reason": "user not found"}]
    assert profile(control, external_id="ghost") is None


def test_canvas_send_creates_user_when_not_existing_only(
    api: httpx.Client, control: httpx.Client
) -> None:
    recipient = {
        "external_user_id": "newbie",
        "send_to_existing_only": False,
        "attributes": {"first_name": "Ann", "tier": "silver"},
    }
    response = send(api, {"canvas_id": "canvas-active-1", "recipients": [recipient]})
    assert response.status_code == 201
    created = profile(control, external_id="newbie")
    assert created is not None
    assert created["attributes"] == {"first_name": "Ann", "tier": "silver"}
    assert _sent_ids(dispatches(control)[0]) == ["newbie"]


def test_canvas_send_attributes_overwrite_before_the_audience_check(
    api: httpx.Client, control: httpx.Client
) -> None:
    track_users(api, {"external_id": "u1", "tier": "bronze", "city": "Oslo"})
    audience = {
        "custom_attribute": {
            "custom_attribute_name": "tier",
            "comparison": "equals",
            "value": "gold",
        }
    }
    response = send(
        api,
        {
            "canvas_id": "canvas-active-1",
            "audience": audience,
            "recipients": [{"external_user_id": "u1", "attributes": {"tier": "gold"}}],
        },
    )
    assert response.status_code == 201
    stored = profile(control, external_id="u1")
    assert stored is not None
    assert stored["attributes"] == {"tier": "gold", "city": "Oslo"}
    assert _sent_ids(dispatches(control)[0]) == ["u1"]


def test_canvas_send_to_alias_recipient(api: httpx.Client, control: httpx.Client) -> None:
    track_users(api, {"user_alias": ALIAS, "_update_existing_only": False, "tier": "gold"})
    response = send(
        api,
        {
            "canvas_id": "canvas-active-1",
            "recipients": [{"user_alias": ALIAS}, {"user_alias": {**ALIAS, "alias_name": "x"}}],
        },
    )
    assert response.status_code == 201
    [dispatch] = dispatches(control)
    assert [s["aliases"] for s in dispatch["sent"]] == [[ALIAS]]
    assert dispatch["skipped"] == [
        {"user_alias": {**ALIAS, "alias_name": "x"}, "reason": "user not found"}
    ]


def test_canvas_broadcast_reaches_the_audience_of_the_segment(
    api: httpx.Client, control: httpx.Client
) -> None:
    track_users(
        api,
        {"external_id": "g1", "tier": "gold"},
        {"external_id": "s1", "tier": "silver"},
        {"external_id": "g2", "tier": "gold", "pets": ["cat"]},
    )
    everyone = send(api, {"canvas_id": "canvas-active-1", "broadcast": True})
    audience = {
        "AND": [
            {
                "custom_attribute": {
                    "custom_attribute_name": "tier",
                    "comparison": "equals",
                    "value": "gold",
                }
            },
            {
                "OR": [
                    {
                        "custom_attribute": {
                            "custom_attribute_name": "pets",
                            "comparison": "includes_value",
                            "value": "cat",
                        }
                    },
                    {
                        "custom_attribute": {
                            "custom_attribute_name": "pets",
                            "comparison": "includes_value",
                            "value": "dog",
                        }
                    },
                ]
            },
        ]
    }
    some = send(api, {"canvas_id": "canvas-active-1", "broadcast": True, "audience": audience})
    assert (everyone.status_code, some.status_code) == (201, 201)
    first, second = dispatches(control)
    assert sorted(_sent_ids(first)) == ["g1", "g2", "s1"]
    assert first["broadcast"] is True
    assert _sent_ids(second) == ["g2"]


@pytest.mark.parametrize(
    ("canvas_id", "notice"),
    [
        ("canvas-paused-1", PAUSED_NOTICE),
        ("canvas-stopped-1", STOPPED_NOTICE),
        ("canvas-archived-1", ARCHIVED_NOTICE),
    ],
)
def test_inactive_canvas_sends_nothing_and_says_so(
    api: httpx.Client, control: httpx.Client, canvas_id: str, notice: str
) -> None:
    track_users(api, {"external_id": "u1", "tier": "bronze"})
    response = send(
        api,
        {
            "canvas_id": canvas_id,
            "recipients": [
                {"external_user_id": "u1", "attributes": {"tier": "gold"}},
                {"external_user_id": "new", "send_to_existing_only": False},
            ],
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert body == {"message": "success", "dispatch_id": body["dispatch_id"], "notice": notice}
    [dispatch] = dispatches(control)
    assert (dispatch["sent"], dispatch["notice"]) == ([], notice)
    assert attributes(control, "u1") == {"tier": "bronze"}
    assert profile(control, external_id="new") is None


def test_canvas_limits_at_the_boundary_are_accepted(api: httpx.Client) -> None:
    recipients = [{"external_user_id": f"u{i}"} for i in range(50)]
    # {"k":"<v>"} is 8 bytes of JSON around the value: 50 KB exactly
    properties = {"k": "v" * (50 * 1024 - 8)}
    body = {
        "canvas_id": "canvas-active-1",
        "recipients": recipients,
        "canvas_entry_properties": properties,
    }
    assert send(api, body).status_code == 201


# ---------------------------------------------------------------- Canvas: rejected

CANVAS = "canvas-active-1"
ONE = [{"external_user_id": "u1"}]
CANVAS_REJECTIONS = [
    ([], "request body must be a JSON object"),
    ({"recipients": ONE}, "canvas_id is required and must be a non-empty string"),
    ({"canvas_id": 7, "recipients": ONE}, "canvas_id is required and must be a non-empty string"),
    ({"canvas_id": "no-such-canvas", "recipients": ONE}, "Invalid canvas_id"),
    (
        {"canvas_id": CANVAS, "recipients": ONE, "trigger_properties": {}},
        "unsupported field(s): trigger_properties",
    ),
    (
        {"canvas_id": CANVAS, "recipients": {"external_user_id": "u1"}},
        "recipients must be an array of objects",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [{"external_user_id": f"u{i}"} for i in range(51)]},
        "recipients may not hold more than 50 objects",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [{"external_user_id": "u1", "user_alias": ALIAS}]},
        "recipients[0] must have exactly one of 'external_user_id' or 'user_alias'",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [*ONE, {"attributes": {"a": 1}}]},
        "recipients[1] must have exactly one of 'external_user_id' or 'user_alias'",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [{"external_user_id": ""}]},
        "recipients[0].external_user_id must be a non-empty string",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [{"user_alias": {"alias_name": "a"}}]},
        "recipients[0].user_alias must be an object with string alias_name and alias_label",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [{"user_alias": ALIAS, "send_to_existing_only": True}]},
        "recipients[0]: send_to_existing_only cannot be used with user aliases",
    ),
    (
        {
            "canvas_id": CANVAS,
            "recipients": [{"external_user_id": "u1", "send_to_existing_only": "no"}],
        },
        "recipients[0].send_to_existing_only must be a boolean",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [{"external_user_id": "u1", "attributes": [1]}]},
        "recipients[0].attributes must be an object",
    ),
    (
        {"canvas_id": CANVAS, "recipients": [{"external_user_id": "u1", "trigger_properties": {}}]},
        "recipients[0] has unsupported field(s): trigger_properties",
    ),
    (
        {"canvas_id": CANVAS, "recipients": ONE, "canvas_entry_properties": "x"},
        "canvas_entry_properties must be an object",
    ),
    (
        {
            "canvas_id": CANVAS,
            "recipients": ONE,
            "canvas_entry_properties": {"k": "v" * (50 * 1024 - 7)},
        },
        "canvas_entry_properties may not exceed 50 KB",
    ),
    (
        {"canvas_id": CANVAS},
        "broadcast must be true to send to the whole segment without recipients",
    ),
    (
        {"canvas_id": CANVAS, "broadcast": False, "audience": {"OR": [{"x": {}}]}},
        "broadcast must be true to send to the whole segment without recipients",
    ),
    (
        {"canvas_id": CANVAS, "broadcast": True, "recipients": ONE},
        "recipients must not be included when broadcast is true",
    ),
    ({"canvas_id": CANVAS, "broadcast": "yes"}, "broadcast must be a boolean"),
    (
        {"canvas_id": CANVAS, "broadcast": True, "audience": []},
        "audience must be an object with exactly one condition or AND/OR",
    ),
    (
        {"canvas_id": CANVAS, "broadcast": True, "audience": {"AND": []}},
        "audience.AND must be a non-empty array",
    ),
    (
        {"canvas_id": CANVAS, "broadcast": True, "audience": {"OR": [{"custom_attribute": 1}]}},
        "audience.OR[0].custom_attribute must be an object",
    ),
]


@pytest.mark.parametrize(("body", "message"), CANVAS_REJECTIONS)
def test_canvas_send_rejections(
    api: httpx.Client, control: httpx.Client, body: Any, message: str
) -> None:
    track_users(api, {"external_id": "u1", "tier": "bronze"})
    response = send(api, body)
    assert (response.status_code, response.json()) == (400, {"message": message})
    assert dispatches(control) == []
    assert attributes(control, "u1") == {"tier": "bronze"}


# ---------------------------------------------------------------- campaign schedules

SCHEDULE = {"time": "2031-01-01T12:00:00Z", "in_local_time": True}


def schedule(api: httpx.Client, body: Any) -> httpx.Response:
    return api.post("/campaigns/trigger/schedule/create", json=body)


def test_campaign_schedule_for_recipients(api: httpx.Client, control: httpx.Client) -> None:
    track_users(api, {"external_id": "u1"})
    response = schedule(
        api,
        {
            "campaign_id": "campaign-email-1",
            "send_id": "send-1",
            "schedule": SCHEDULE,
            "trigger_properties": {"a": 1, "b": 1},
            "recipients": [
                {"external_user_id": "u1", "trigger_properties": {"b": 2}},
                {"external_user_id": "ghost"},
            ],
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"dispatch_id", "schedule_id", "message"}
    assert body["message"] == "success"
    [dispatch] = dispatches(control)
    assert (dispatch["dispatch_id"], dispatch["schedule_id"]) == (
        body["dispatch_id"],
        body["schedule_id"],
    )
    assert (dispatch["kind"], dispatch["schedule"], dispatch["send_id"]) == (
        "campaign_schedule",
        SCHEDULE,
        "send-1",
    )
    assert [(s["external_id"], s["properties"]) for s in dispatch["sent"]] == [
        ("u1", {"a": 1, "b": 2})
    ]
    assert dispatch["skipped"] == [{"external_user_id": "ghost", "reason": "user not found"}]
    assert profile(control, external_id="ghost") is None


def test_campaign_schedule_broadcast(api: httpx.Client, control: httpx.Client) -> None:
    track_users(api, {"external_id": "u1"}, {"external_id": "u2"})
    body = {"campaign_id": "campaign-push-1", "broadcast": True, "schedule": SCHEDULE}
    assert schedule(api, body).status_code == 201
    assert sorted(_sent_ids(dispatches(control)[0])) == ["u1", "u2"]


CAMPAIGN = "campaign-email-1"
CAMPAIGN_REJECTIONS = [
    ("x", "request body must be a JSON object"),
    (
        {"schedule": SCHEDULE, "recipients": ONE},
        "campaign_id is required and must be a non-empty string",
    ),
    ({"campaign_id": "nope", "schedule": SCHEDULE, "recipients": ONE}, "Invalid campaign_id"),
    ({"campaign_id": CAMPAIGN, "recipients": ONE}, "schedule is required and must be an object"),
    (
        {"campaign_id": CAMPAIGN, "recipients": ONE, "schedule": {}},
        "schedule.time is required and must be an ISO 8601 datetime",
    ),
    (
        {"campaign_id": CAMPAIGN, "recipients": ONE, "schedule": {"time": "tomorrow"}},
        "schedule.time is required and must be an ISO 8601 datetime",
    ),
    (
        {
            "campaign_id": CAMPAIGN,
            "recipients": ONE,
            "schedule": {"time": "2031-01-01T00:00:00Z", "at_optimal_time": "y"},
        },
        "schedule.at_optimal_time must be a boolean",
    ),
    (
        {
            "campaign_id": CAMPAIGN,
            "recipients": ONE,
            "schedule": {"time": "2031-01-01T00:00:00Z", "when": 1},
        },
        "schedule has unsupported field(s): when",
    ),
    (
        {"campaign_id": CAMPAIGN, "schedule": SCHEDULE},
        "broadcast must be true to send to the whole segment without recipients",
    ),
    (
        {"campaign_id": CAMPAIGN, "schedule": SCHEDULE, "broadcast": True, "recipients": ONE},
        "recipients must not be included when broadcast is true",
    ),
    (
        {"campaign_id": CAMPAIGN, "schedule": SCHEDULE, "send_id": 5, "recipients": ONE},
        "send_id must be a string",
    ),
    (
        {
            "campaign_id": CAMPAIGN,
            "schedule": SCHEDULE,
            "trigger_properties": [],
            "recipients": ONE,
        },
        "trigger_properties must be an object",
    ),
    (
        {
            "campaign_id": CAMPAIGN,
            "schedule": SCHEDULE,
            "recipients": [{"external_user_id": f"u{i}"} for i in range(51)],
        },
        "recipients may not hold more than 50 objects",
    ),
    (
        {
            "campaign_id": CAMPAIGN,
            "schedule": SCHEDULE,
            "recipients": [{"external_user_id": "u1", "attributes": {"a": 1}}],
        },
        "recipients[0] has unsupported field(s): attributes",
    ),
    (
        {
            "campaign_id": CAMPAIGN,
            "schedule": SCHEDULE,
            "recipients": [{"external_user_id": "u1", "canvas_entry_properties": {}}],
        },
        "recipients[0] has unsupported field(s): canvas_entry_properties",
    ),
    (
        {"campaign_id": CAMPAIGN, "schedule": SCHEDULE, "recipients": [{}]},
        "recipients[0] must have exactly one of 'external_user_id' or 'user_alias'",
    ),
]


@pytest.mark.parametrize(("body", "message"), CAMPAIGN_REJECTIONS)
def test_campaign_schedule_rejections(
    api: httpx.Client, control: httpx.Client, body: Any, message: str
) -> None:
    response = schedule(api, body)
    assert (response.status_code, response.json()) == (400, {"message": message})
    assert dispatches(control) == []


@pytest.mark.parametrize(
    ("path", "body", "permission"),
    [
        ("/canvas/trigger/send", {"canvas_id": CANVAS, "broadcast": True}, "canvas.trigger.send"),
        (
            "/campaigns/trigger/schedule/create",
            {"campaign_id": CAMPAIGN, "broadcast": True, "schedule": SCHEDULE},
            "campaigns.trigger.schedule.create",
        ),
    ],
)
def test_messaging_needs_its_permission(
    api: httpx.Client, control: httpx.Client, path: str, body: Any, permission: str
) -> None:
    no_key = httpx.post(api.base_url.join(path), json=body)
    assert (no_key.status_code, no_key.json()) == (401, {"message": "Invalid API Key"})
    weak = api.post(path, json=body, headers={"Authorization": f"Bearer {TRACK_ONLY_KEY}"})
    assert weak.status_code == 403
    assert permission in weak.json()["message"]
    assert dispatches(control) == []
