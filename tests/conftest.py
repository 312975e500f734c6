"""Session-wide fixtures shared by the integration tests: a PostgreSQL server on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.pg_server import find_bindir, postgres_server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server; skipped without binaries, unless CI requires it."""
    if find_bindir() is None:
        if os.environ.get("ENGAGE_SYNC_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required (ENGAGE_SYNC_REQUIRE_POSTGRES=1) but initdb "
                        "was not found; apt-get install postgresql")
        pytest.skip("PostgreSQL binaries not installed (apt-get install postgresql)")
    with postgres_server() as url:
        yield url
