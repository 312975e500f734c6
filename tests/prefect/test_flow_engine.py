"""`sync_integration` is an async flow whose body runs the sync on the thread that runs the flow
(`asyncio.run`'s: the main thread of a CLI run or a deployment's process), so SIGTERM's
graceful stop can be installed there; Prefect's async engine does not hold the run's end to
join its heartbeat thread (`adapters/flows.py`)."""

from __future__ import annotations

import asyncio
import threading
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
