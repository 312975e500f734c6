"""Fixtures for the messaging, dashboard and SCIM contract tests (imported by those files).

One sandbox per session on a free loopback port, with the packaged demo seed (so the tests
also prove the demo data is what the README promises); every test starts from a reset.
Rate limits of the groups these tests hammer are raised so the tests never see a 429 they
did not ask for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from engage_sandbox.state.seed import demo_seed_text
from engage_sandbox.state.settings import RateLimit, SandboxSettings
from engage_sandbox.web.server import run_sandbox

SCIM_TOKEN = "sandbox-scim-token"
TRACK_ONLY_KEY = "sandbox-track-only-key"
ROOMY = RateLimit(100_000, 60)
RAISED_LIMITS = {
    "preference_update": ROOMY,
    "job_sync_status": ROOMY,
    "custom_attributes": ROOMY,
}


def demo_seed() -> dict[str, Any]:
    """The packaged demo seed as a fresh mapping."""
    raw = yaml.safe_load(demo_seed_text())
    assert isinstance(raw, dict)
    return raw


@pytest.fixture(scope="session")
def s2_sandbox() -> Iterator[Any]:
    """The session's sandbox (demo seed, raised limits on the paged endpoints)."""
    with run_sandbox(settings=SandboxSettings(rate_limits=RAISED_LIMITS)) as sandbox:
        yield sandbox


@pytest.fixture(scope="session")
def _clients(s2_sandbox: Any) -> Iterator[dict[str, httpx.Client]]:
    """Session clients (building one costs an SSL context, so tests share them)."""
    api_headers = {"Authorization": f"Bearer {s2_sandbox.api_key}"}
    scim_headers = {"Authorization": f"Bearer {SCIM_TOKEN}", "X-Request-Origin": "tests.example"}
    base = s2_sandbox.base_url
    with (
        httpx.Client(base_url=base, headers=api_headers, timeout=10) as api_client,
        httpx.Client(base_url=s2_sandbox.control_url, timeout=10) as control_client,
        httpx.Client(base_url=base, headers=scim_headers, timeout=10) as scim_client,
    ):
        yield {"api": api_client, "control": control_client, "scim": scim_client}


@pytest.fixture()
def api(_clients: dict[str, httpx.Client]) -> httpx.Client:
    """An API client holding the all-permissions demo key, on a freshly reset sandbox."""
    _clients["control"].post("/reset").raise_for_status()
    return _clients["api"]


@pytest.fixture()
def control(_clients: dict[str, httpx.Client], api: httpx.Client) -> httpx.Client:
    """A client of the control plane (`/_sandbox`), after the reset done by `api`."""
    return _clients["control"]


@pytest.fixture()
def scim(_clients: dict[str, httpx.Client], api: httpx.Client) -> httpx.Client:
    """A SCIM client (token and X-Request-Origin), after the reset done by `api`."""
    return _clients["scim"]


def dispatches(control: httpx.Client) -> list[dict[str, Any]]:
    """The sandbox's dispatch log, oldest first."""
    response = control.get("/dispatches")
    assert response.status_code == 200
    items = response.json()["dispatches"]
    assert isinstance(items, list)
    return items


def track_users(api: httpx.Client, *attributes: dict[str, Any]) -> None:
    """Create or update profiles through /users/track (alias-only ones need the flag)."""
    response = api.post("/users/track", json={"attributes": list(attributes)})
    assert response.status_code == 201, response.text
