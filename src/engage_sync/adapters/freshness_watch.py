"""The status server's watch on freshness: a sync that silently stopped running is seen.

A run evaluates freshness when it ends (`alert_check.after_run`), but a sync that no longer
runs never ends: this thread looks every ENGAGE_SYNC_FRESHNESS_CHECK_SECONDS (default 60) at
each integration file of the served folder with `alerts.fresh_within` and raises (or clears)
its freshness alert through the state database, as a run would, so each alert is delivered
once whichever process saw it first. A file that does not load is left to its own runs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from engage_sync.adapters.alert_check import check_freshness
from engage_sync.config.files import integration_files, load_integration
from engage_sync.errors import ConfigError
from engage_sync.state.store import StateStore

log = logging.getLogger("engage_sync.alerts")

EVERY_ENV = "ENGAGE_SYNC_FRESHNESS_CHECK_SECONDS"
DEFAULT_EVERY = 60.0


class FreshnessWatch:
    """Checks the folder's integrations every `every` seconds on a daemon thread."""

    def __init__(self, store: StateStore, folder: Path, every: float,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.store, self.folder, self.every = store, folder, every
        self.clock = clock or (lambda: datetime.now(UTC))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="freshness-watch", daemon=True)

    def check_once(self) -> None:
        """Every watched integration's freshness, now; never raises."""
        for path in integration_files(self.folder):
            try:
                integration = load_integration(path)
            except ConfigError:
                continue
            try:
                check_freshness(integration, self.store, self.clock())
            except Exception as exc:  # the state database away: the next look tries again
                log.warning("integration %s: freshness not checked (%s)", integration.name,
                            type(exc).__name__)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.check_once()

    def start(self) -> FreshnessWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


def start(store: StateStore, folder: Path | None) -> FreshnessWatch | None:
    """The watch over `folder`, started (None without a folder)."""
    if folder is None:
        return None
    every = float(os.environ.get(EVERY_ENV) or DEFAULT_EVERY)
    if every <= 0:
        raise ConfigError(f"{EVERY_ENV} must be a positive number of seconds")
    return FreshnessWatch(store, folder, every).start()
