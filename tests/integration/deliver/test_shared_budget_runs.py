"""Two runs of different integrations in two OS processes at once, against one sandbox that
enforces a low /users/track limit: with a shared budget (PostgreSQL, Redis) the sandbox sees
no window over the limit and answers no 429; with private (`local`) budgets, the control case,
it answers 429s, while one process alone with its private budget gets none. And a shared store
lost mid-run stops the run with a clear error; the next run delivers every row."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from engage_sandbox.state.settings import RateLimit, SandboxSettings
from engage_sandbox.web.server import SandboxHandle, run_sandbox
from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.deliver.service_windows import EDGE_MARGIN
from tests.integration.conftest import (
    ROOT,
    Service,
    Warehouse,
    _wait_for_request,
    integration_body,
    resume_cli,
    run_cli,
    user_rows,
    users_table,
    write_integration,
)
from tests.pg_server import find_bindir, postgres_instance
from tests.redis_server import RedisServer

LIMIT = 20  # /users/track requests per 1-second window at this sandbox
ROWS = 500  # per integration: 50 requests of 10 objects
TRACK = "/users/track"
RUN_DEADLINE = 180.0  # seconds a run of ROWS may take on a busy machine (about 3 s when quiet)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tight_sandbox() -> Iterator[SandboxHandle]:
    settings = SandboxSettings(seed=ROOT / "config" / "sandbox-seed.yaml",
                               rate_limits={"users_track": RateLimit(LIMIT, 1)})
    # its own process: answers never wait for the GIL of the run under test (an answer slower
    # than the count margin ends the following of its windows, by design)
    with run_sandbox(settings=settings, in_process=False) as handle:
        yield handle


@pytest.fixture
def tight(tight_sandbox: SandboxHandle) -> Iterator[Service]:
    tight_sandbox.reset()
    with httpx.Client(base_url=tight_sandbox.control_url, timeout=30) as control:
        yield Service(tight_sandbox.base_url, control)


def integration(tmp_path: Path, svc: Service, name: str, backend: str) -> Path:
    url = f"duckdb:///{tmp_path / f'{name}.duckdb'}"
    engine = sa.create_engine(url)
    wh = Warehouse(name, url, engine)
    users_table(wh)
    wh.insert("users_sync", user_rows(ROWS, prefix=name[0]))
    engine.dispose()
    budget: dict[str, Any] = {"backend": backend}
    if backend != "local":
        budget["url"] = "${BUDGET_URL}"
    return write_integration(tmp_path, name, integration_body(
        wh, svc, "attributes", "users_sync",
        service={"limits": {"objects_per_request": 10},
                 "rate_limit": {"requests": LIMIT, "per_seconds": 1},
                 "rate_budget": budget}))


def state_url(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / f'{name}-state.db'}"


def owner(entry: dict[str, Any]) -> str:
    """Which integration sent a logged request: its users' ids start with its initial ('' for
    a request refused before its body was read, e.g. a 429)."""
    body = entry.get("body") or {}
    return str(body["attributes"][0]["external_id"][0]) if "attributes" in body else ""


def delivered(svc: Service, prefix: str) -> set[str]:
    return {p["external_id"] for p in svc.profiles()
            if str(p.get("external_id", "")).startswith(prefix)
            and (p.get("custom_attributes") or p.get("attributes") or {}).get("plan") == "free"}


def two_runs_at_once(tmp_path: Path, svc: Service, key: str, backend: str
                     ) -> list[dict[str, Any]]:
    paths = [integration(tmp_path, svc, name, backend) for name in ("alpha", "beta")]
    procs = [run_cli(p, state_url(tmp_path, p.stem), key) for p in paths]
    for proc in procs:
        _, err = proc.communicate(timeout=RUN_DEADLINE)
        assert proc.returncode == 0, err.decode()
    entries = svc.requests(TRACK)
    spans = {who: [e["received_at"] for e in entries if owner(e) == who] for who in "ab"}
    # the two runs really ran at the same time: each sent while the other was sending
    assert min(spans["a"]) < max(spans["b"]) and min(spans["b"]) < max(spans["a"])
    return entries


@pytest.fixture
def budget_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "postgres":
        url = str(request.getfixturevalue("postgres_url"))
    else:
        url = request.getfixturevalue("redis").url
    monkeypatch.setenv("BUDGET_URL", url)
    return str(request.param)


def test_one_process_following_the_sandboxs_windows_is_never_answered_429(
        tight: Service, tight_sandbox: SandboxHandle, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A private budget grants the limit in each of the service's windows once it has read
    their edges from `X-RateLimit-Reset` (`deliver/ratelimit.py`): 50 requests over three
    windows at least, each answered 201, and every edge it follows is one of the sandbox's (its
    windows start on whole seconds)."""
    monkeypatch.setenv("ENGAGE_API_KEY", tight_sandbox.api_key)
    budgets = RateBudgets()
    budget = budgets.budget(tight.base_url, "users_track", requests=LIMIT, per_seconds=1)
    edges: list[float] = []  # the edge followed after each answer, while followed
    observe = budget.observe

    def observed(headers: Any, elapsed: float | None = None) -> None:
        observe(headers, elapsed)
        if (edge := budget.service_edge) is not None:
            edges.append(edge)

    monkeypatch.setattr(budget, "observe", observed)
    path = integration(tmp_path, tight, "alpha", "local")
    record = sync_file(path, store=open_state(state_url(tmp_path, "alpha")),
                       budgets=budgets).record
    assert record["job_status"] == "success", record
    assert budgets.budget(tight.base_url, "users_track") is budget  # the one observed
    entries = tight.requests(TRACK)
    assert Counter(e["status"] for e in entries) == {201: ROWS // 10}
    assert max(Counter(math.floor(e["received_at"]) for e in entries).values()) <= LIMIT
    off = [edge for edge in edges if abs(edge - round(edge)) >= 0.05]
    assert not off, off  # every edge followed is one of the sandbox's (whole seconds)
    # It follows an edge to the end, unless an answer slower than the widest count margin (a
    # quarter window) ended the following for good, as one may on a busy machine: then the
    # edges followed before it were checked above, and the budget's margin says why it stopped
    if budget.service_edge is None:
        widest = min(EDGE_MARGIN, budget.per_seconds / 4)
        assert budget.count_margin > widest, (budget.count_margin, edges)
    assert len(delivered(tight, "a")) == ROWS


@pytest.mark.parametrize("budget_url", ["postgres", "redis"], indirect=True)
def test_two_processes_sharing_a_budget_stay_within_the_limit(
        tight: Service, tight_sandbox: SandboxHandle, tmp_path: Path, budget_url: str) -> None:
    entries = two_runs_at_once(tmp_path, tight, tight_sandbox.api_key, budget_url)
    statuses = Counter(e["status"] for e in entries)
    assert statuses == {201: 2 * ROWS // 10}, statuses  # no 429, nothing sent twice
    per_window = Counter(math.floor(e["received_at"]) for e in entries)
    assert max(per_window.values()) <= LIMIT
    assert len(delivered(tight, "a")) == ROWS and len(delivered(tight, "b")) == ROWS
    times = [e["received_at"] for e in entries]
    rate = (len(times) - 1) / (max(times) - min(times))
    # shown, not asserted: the CPU of a busy machine sets it as much as the budget does (the
    # budget's own pace, the bucket used fully, is a fake-clock unit test: test_rate_budget_
    # shared.py::test_at_its_pace_a_budget_uses_the_bucket_fully_in_few_store_calls); the runs
    # made progress: both ended, every row delivered, within RUN_DEADLINE
    print(f"{budget_url}: {rate:.1f} requests/s together, limit {LIMIT}")


def test_control_two_processes_with_private_budgets_are_answered_429(
        tight: Service, tight_sandbox: SandboxHandle, tmp_path: Path) -> None:
    """Without a shared budget each process believes it owns the limit."""
    entries = two_runs_at_once(tmp_path, tight, tight_sandbox.api_key, "local")
    assert any(e["status"] == 429 for e in entries)
    assert len(delivered(tight, "a")) == ROWS and len(delivered(tight, "b")) == ROWS


# --- the shared store lost mid-run ----------------------------------------------------------


@pytest.fixture(params=["postgres", "redis"])
def lost_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[tuple[str, Callable[[], None], Callable[[], None]]]:
    """A store of this test only: (its URL, stop it, start it again on the same port)."""
    if request.param == "redis":
        request.getfixturevalue("redis")  # skips without redis-server
        server = RedisServer()
        server.start()
        monkeypatch.setenv("BUDGET_URL", server.url)
        yield server.url, server.stop, server.start
        server.stop()
        return
    if find_bindir() is None:
        request.getfixturevalue("postgres_url")  # skips (or fails in CI) as the others do
    with postgres_instance() as pg:
        monkeypatch.setenv("BUDGET_URL", pg.url)
        yield pg.url, pg.stop, pg.start


def test_a_store_lost_mid_run_stops_it_with_a_clear_error_and_the_next_run_delivers_all(
        tight: Service, tight_sandbox: SandboxHandle, tmp_path: Path,
        lost_store: tuple[str, Callable[[], None], Callable[[], None]]) -> None:
    url, stop, start = lost_store
    backend = "postgres" if url.startswith("postgresql") else "redis"
    path = integration(tmp_path, tight, "alpha", backend)
    states = state_url(tmp_path, "alpha")
    proc = run_cli(path, states, tight_sandbox.api_key)
    _wait_for_request(tight, 10, proc, TRACK)
    stop()
    _, err = proc.communicate(timeout=RUN_DEADLINE)
    assert proc.returncode == 2, err.decode()
    message = err.decode()
    # promptly: the requests queued behind the first one that found the store gone fail at
    # once instead of each trying the store again (each try of a store call, up to its 5 s
    # deadline, begins with this one line)
    assert message.count("did not answer") == 1, message
    assert f"the shared rate budget ({backend} at " in message
    assert "nothing was lost, run it again to resume" in message
    sent_before = len(tight.requests(TRACK))
    assert sent_before < ROWS // 10  # it stopped mid-run
    store = open_state(states)
    first = store.runs_newest_first("alpha", 0, 1)[0]
    assert first["job_status"] == "error" and "shared rate budget" in first["message"]

    start()
    record = resume_cli(path, states, tight_sandbox.api_key)
    assert record["job_status"] == "success"
    assert len(delivered(tight, "a")) == ROWS  # nothing lost
    assert store.cursor("alpha") is not None
    assert first["rows_synced"] + record["rows_synced"] >= ROWS
    store.engine.dispose()
