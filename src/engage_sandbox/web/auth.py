"""Which endpoint a request is for, what it needs, and the authentication check.

Invariants: every path of the spec's permission table is listed in :data:`ENDPOINTS` with its
permission (or SCIM) and rate-limit group; the check never consults anything but the seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engage_sandbox.state.seed import Seed

SCIM = "scim"
SCIM_ERROR_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:Error"
INVALID_KEY = "Invalid API Key"


@dataclass(frozen=True)
class Endpoint:
    """One gated endpoint: methods, path pattern, permission (or ``SCIM``), rate group."""

    methods: frozenset[str]
    pattern: str
    permission: str
    group: str

    @property
    def is_scim(self) -> bool:
        """True for SCIM endpoints (SCIM token + X-Request-Origin instead of an API key)."""
        return self.permission == SCIM


def _e(methods: str, pattern: str, permission: str, group: str) -> Endpoint:
    return Endpoint(frozenset(methods.split(",")), pattern, permission, group)


ENDPOINTS: tuple[Endpoint, ...] = (
    _e("POST", "/users/track", "users.track", "users_track"),
    _e("POST", "/subscription/status/set", "subscription.status.set", "subscription"),
    _e("POST", "/v2/subscription/status/set", "subscription.status.set", "subscription"),
    _e("POST", "/users/merge", "users.merge", "identity"),
    _e("POST", "/users/delete", "users.delete", "identity"),
    _e("POST", "/users/identify", "users.identify", "identity"),
    _e("POST", "/users/alias/update", "users.alias.update", "identity"),
    _e("POST", "/users/alias/new", "users.alias.new", "identity"),
    _e("POST", "/canvas/trigger/send", "canvas.trigger.send", "canvas_send"),
    _e(
        "POST",
        "/campaigns/trigger/schedule/create",
        "campaigns.trigger.schedule.create",
        "default",
    ),
    _e("GET", "/custom_attributes", "custom_attributes.get", "custom_attributes"),
    _e(
        "GET",
        "/cdi/integrations/{}/job_sync_status",
        "cdi.integration_job_status",
        "job_sync_status",
    ),
    _e("GET", "/preference_center/v1/list", "preference_center.list", "preference_list"),
    _e("PUT,POST", "/preference_center/v1/{}", "preference_center.update", "preference_update"),
    _e("GET", "/campaign/translations/", "campaigns.translations.get", "default"),
    _e("GET", "/campaign/translations", "campaigns.translations.get", "default"),
    _e("GET", "/canvases/translations", "canvas.translations.get", "default"),
    _e("GET", "/canvas/translations", "canvas.translations.get", "default"),
    _e("GET,POST", "/scim/v2/Users", SCIM, "scim"),
    _e("GET,PUT,DELETE", "/scim/v2/Users/{}", SCIM, "scim"),
)

_EXACT: dict[str, list[Endpoint]] = {}
_TEMPLATED: list[tuple[re.Pattern[str], Endpoint]] = []
for _endpoint in ENDPOINTS:
    if "{}" in _endpoint.pattern:
        regex = re.escape(_endpoint.pattern).replace(r"\{\}", "[^/]+")
        _TEMPLATED.append((re.compile(f"^{regex}$"), _endpoint))
    else:
        _EXACT.setdefault(_endpoint.pattern, []).append(_endpoint)


def match_endpoint(method: str, path: str) -> Endpoint | None:
    """The gated endpoint for ``method`` and ``path``, or None (control plane, unknown)."""
    for endpoint in _EXACT.get(path, ()):
        if method in endpoint.methods:
            return endpoint
    if path in _EXACT:
        return None
    for regex, endpoint in _TEMPLATED:
        if method in endpoint.methods and regex.match(path):
            return endpoint
    return None


def bearer(headers: dict[bytes, bytes]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    value = headers.get(b"authorization")
    if value is None:
        return None
    scheme, _, token = value.decode("latin-1").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def scim_error(status: int, detail: str) -> dict[str, Any]:
    """A SCIM error body (spec: Errors 5)."""
    return {"schemas": [SCIM_ERROR_SCHEMA], "detail": detail, "status": status}


def check_auth(
    endpoint: Endpoint, headers: dict[bytes, bytes], seed: Seed
) -> tuple[int, dict[str, Any]] | None:
    """None when the request may proceed, else (status, JSON body) to answer.

    API endpoints: missing or unknown key → 401 ``{"message": "Invalid API Key"}``; a key
    without the permission → 403. SCIM: missing or unknown token → 401, missing
    ``X-Request-Origin`` → 400, both with the SCIM error body.
    """
    token = bearer(headers)
    if endpoint.is_scim:
        if token is None or token not in seed.scim_tokens:
            return 401, scim_error(401, "Invalid SCIM token")
        if not headers.get(b"x-request-origin", b"").strip():
            return 400, scim_error(400, "X-Request-Origin header is required")
        return None
    allowed = seed.key_allows(token, endpoint.permission) if token is not None else None
    if allowed is None:
        return 401, {"message": INVALID_KEY}
    if not allowed:
        return 403, {
            "message": f"This API key does not have the '{endpoint.permission}' permission "
            "needed for this endpoint."
        }
    return None
