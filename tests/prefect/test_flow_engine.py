"""`sync_integration` is an async flow whose body runs the sync on the thread that runs the flow
(`asyncio.run`'s: the main thread of a CLI run or a deployment's process), so SIGTERM's
graceful stop can be installed there; Prefect's async engine does not hold the run's end to
join its heartbeat thread (`adapters/flows.py`). `run_blocking` keeps Ctrl-C as a sync flow has
it: KeyboardInterrupt at once, wherever the blocking body is."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from engage_sync.adapters import flows


def test_the_flow_s_body_runs_on_the_main_thread_of_an_async_flow(
        prefect_api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[threading.Thread, bool]] = []

    def run_one(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            asyncio.get_running_loop()
            looping = True
        except RuntimeError:
            looping = False
        seen.append((threading.current_thread(), looping))
        return {"job_status": "success"}

    monkeypatch.setattr(flows, "run_one", run_one)
    assert flows.sync_integration.isasync
    record = asyncio.run(flows.sync_integration("users"))
    assert record == {"job_status": "success"}
    assert seen == [(threading.main_thread(), True)]  # the loop's thread, blocked meanwhile


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """SIGINT as a fresh interpreter has it (a test runner's worker may have another)."""
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, found)


def test_ctrl_c_interrupts_a_blocking_body_at_once(python_sigint: None) -> None:
    reached: list[str] = []

    async def body() -> str:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while the sync blocks the loop
        time.sleep(0.2)
        reached.append("after the sleep")  # asyncio.run alone: the body went on
        return "done"

    with pytest.raises(KeyboardInterrupt):
        flows.run_blocking(body())
    assert reached == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
