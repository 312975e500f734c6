"""Fixtures: one sandbox per session on loopback, reset before each test that uses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engage_sandbox.web.server import SandboxHandle, run_sandbox

SCIM_TOKEN = "sandbox-scim-token"  # SANDBOX ONLY (demo seed)
TRACK_ONLY_KEY = "sandbox-track-only-key"  # SANDBOX ONLY (demo seed)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxHandle]:
    """A full-mode sandbox with the demo seed, shared by the whole session."""
    with run_sandbox() as handle:
        yield handle


@pytest.fixture
def client(sandbox: SandboxHandle) -> Iterator[httpx.Client]:
    """An httpx client with the demo key; the sandbox is reset first."""
    sandbox.reset()
    with httpx.Client(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        timeout=10,
    ) as http:
        yield http


@pytest.fixture
def control(sandbox: SandboxHandle) -> Iterator[httpx.Client]:
    """An httpx client for the control plane (``/_sandbox``)."""
    with httpx.Client(base_url=sandbox.control_url, timeout=10) as http:
        yield http


@pytest.fixture
def scim_headers() -> dict[str, str]:
    """Headers of a valid SCIM request."""
    return {"Authorization": f"Bearer {SCIM_TOKEN}", "X-Request-Origin": "tests.example"}


def profile(control: httpx.Client, **query: Any) -> dict[str, Any] | None:
    """The control-plane view of one profile, or None when there is none."""
    response = control.get("/profiles", params=query)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body
