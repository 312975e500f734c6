"""Translations of campaign messages and Canvas steps, read from the seed.

Contract choices where the interface says "not shown": all ids are query parameters; the
Canvas path is `/canvases/translations` only. Error order and codes: see
`campaign_translation` and `canvas_translations`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engage_sandbox.handlers.control import json_response
from engage_sandbox.state.dashboard_seed import DashboardSeed, Message, seed_of


def _errors(status: int, *messages: str) -> Response:
    return json_response({"errors": [{"message": m} for m in messages]}, status)


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
    return json_response({"translations": _records(seed, message, [locale_id])})


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
    return json_response({"translations": _records(seed, step, sorted(step.translations))})
