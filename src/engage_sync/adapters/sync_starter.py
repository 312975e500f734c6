"""Runs started by the status server (`POST /cdi/integrations/{id}/sync`), in its process.

Invariant: at most one run per integration at a time from this starter, and none while another
process holds a live lease on one (`StateStore.has_live_run`); the check and the start happen
under one lock, so of concurrent calls exactly one starts a run. Each run is `wiring.sync_file`
in a thread of its own; its outcome is its record (and its lineage events), a failure a log
line without a traceback or a value.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from engage_sync.adapters.failures import one_line
from engage_sync.state.store import StateStore

log = logging.getLogger("engage_sync.status_server")

Sync = Callable[[Path], object]
"""Runs one integration file to its end (`wiring.sync_file` with the server's store)."""


class SyncStarter:
    def __init__(self, store: StateStore, sync: Sync) -> None:
        self.store = store
        self.sync = sync
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    def start(self, integration: str, path: Path) -> bool:
        """Start a run of the file in a thread; False (nothing started) while one is in
        progress, here or in another process."""
        return self.start_all([(integration, path)])

    def start_all(self, runs: list[tuple[str, Path]]) -> bool:
        """Start a run of each (integration, file), each in a thread; False (nothing started)
        while any of them is in progress, here or in another process."""
        with self._lock:
            if any(self.in_progress(integration) for integration, _ in runs):
                return False
            for integration, path in runs:
                thread = threading.Thread(target=self._run, args=(integration, path),
                                          daemon=True, name=f"sync-{integration}")
                self._threads[integration] = thread
                thread.start()
            return True

    def in_progress(self, integration: str) -> bool:
        thread = self._threads.get(integration)
        return (thread is not None and thread.is_alive()) or self.store.has_live_run(integration)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the runs started so far (tests, shutdown)."""
        for thread in list(self._threads.values()):
            thread.join(timeout)

    def _run(self, integration: str, path: Path) -> None:
        try:
            self.sync(path)
        except Exception as exc:  # recorded by the run itself; the server goes on
            log.warning("sync of %s started by the status server failed: %s", integration,
                        one_line(exc, integration))
