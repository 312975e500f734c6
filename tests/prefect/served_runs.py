"""Helpers of the tests that serve several deployments under load: a folder of integrations
with names of their own, the sandbox answering slowly, and the flow runs the server holds."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType

from engage_sandbox.web.server import SandboxHandle
from tests.prefect.conftest import build_folder

FLOW = "engage-sync"
PAGE = 200  # the Prefect server's largest page
ACTIVE = (StateType.RUNNING, StateType.PENDING, StateType.CANCELLING)
ENDED = (StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED)


def named_folder(root: Path, base_url: str, *names: str) -> Path:
    """`build_folder`'s integrations under `names` (users, events, users, …): deployments no
    other test serves, each with a first run that sends."""
    folder = build_folder(root, base_url)
    sources = [folder / "users.yaml", folder / "events.yaml"]
    for i, name in enumerate(names):
        shutil.copy(sources[i % 2], folder / f"{name}.yaml")
    for source in sources:
        source.unlink()
    return folder


@contextmanager
def slow_sandbox(sandbox: SandboxHandle, seconds: float) -> Iterator[None]:
    """Every request the sandbox serves answered `seconds` late, so runs stay in flight."""
    sandbox.reset()
    rule = {"path": "*", "action": "delay", "delay_seconds": seconds}
    with httpx.Client(base_url=sandbox.control_url, timeout=30) as control:
        control.post("/faults", json=[rule]).raise_for_status()
        try:
            yield
        finally:
            control.post("/faults", json=[]).raise_for_status()


def runs_of(*names: str, types: tuple[StateType, ...] = tuple(StateType)) -> list[FlowRun]:
    """The flow runs of the deployments `engage-sync/<name>` in a state of `types` (a schedule
    creates many runs ahead: those listed here are never cut at the server's page size)."""
    found: list[FlowRun] = []
    with get_client(sync_client=True) as client:
        while True:
            page = client.read_flow_runs(
                deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=list(names))),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=list(types)))),
                limit=PAGE, offset=len(found))
            found += page
            if len(page) < PAGE:
                return found


def in_state(runs: list[FlowRun], *types: StateType) -> list[FlowRun]:
    return [r for r in runs if r.state is not None and r.state.type in types]


def states(runs: list[FlowRun]) -> list[str]:
    return sorted(f"{r.state.type.value}/{r.state.name}" if r.state else "none" for r in runs)


def wait_until(condition: Callable[[], bool], seconds: float, what: Callable[[], str]) -> None:
    """Until `condition()` holds; fails after `seconds` with `what()` (looked at every 0.3 s)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what()}")
        time.sleep(0.3)


def paused(*names: str) -> dict[str, bool]:
    with get_client(sync_client=True) as client:
        return {n: bool(client.read_deployment_by_name(f"{FLOW}/{n}").paused) for n in names}
