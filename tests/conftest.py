"""Fixtures for every test: PostgreSQL and Redis on loopback, and the root logger left as each
test found it. Property tests have no deadline: on a shared 2-core machine a first example
that imports or warms a cache can exceed Hypothesis's 200 ms and fail a correct test."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.pg_server import find_bindir, postgres_server
from tests.redis_server import RedisServer, redis_server

# Commands the tests start without PREFECT_API_URL use Prefect's temporary server, never leave
# a background one (`cli/local_server.py`; tests/prefect/test_local_server.py tests that)
os.environ.setdefault("ENGAGE_SYNC_PREFECT_SERVER", "temporary")

settings.register_profile("engage-sync", deadline=None)
settings.load_profile("engage-sync")


@pytest.fixture(autouse=True)
def _root_logging() -> Iterator[None]:
    """Tests that call `cli.main` in-process configure the root logger with a handler on
    pytest's captured stderr, which is closed after the test: later log records would fail
    (and Prefect's handler recurse on the failure). Restore the root logger after each test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


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


def need_redis() -> None:
    """Skip without `redis-server`, unless CI requires it."""
    if shutil.which("redis-server") is None:
        if os.environ.get("ENGAGE_SYNC_REQUIRE_REDIS") == "1":
            pytest.fail("Redis is required (ENGAGE_SYNC_REQUIRE_REDIS=1) but redis-server was "
                        "not found; apt-get install redis-server")
        pytest.skip("redis-server not installed (apt-get install redis-server)")


@pytest.fixture(scope="session")
def redis() -> Iterator[RedisServer]:
    """A throwaway Redis server for the session (shared rate budgets)."""
    need_redis()
    with redis_server() as server:
        yield server
