"""The snapshot as a stage of the loop: it moves on once the run's requests are settled.

Invariants: the snapshot is moved on (`advance`) only from the journal, after the run's last
settlement (`close`); a run that ends without `close` (failed, stopped) moves it on over what
it settled so far (`stop`), which a resume repeats harmlessly; a failure there is logged,
never raised over the run's own error (those users are compared and sent again next time).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from engage_sync.items import Item, RowOutcome

log = logging.getLogger(__name__)


class SnapshotStage:
    """Calls `advance` once the run settled everything, or at its end otherwise."""

    def __init__(self, integration: str, advance: Callable[[], object]) -> None:
        self.integration, self.advance = integration, advance
        self.advanced = False

    def open(self) -> None:
        self.advanced = False

    def batch(self, outcomes: list[RowOutcome]) -> None:
        pass

    def skipped(self, items: Sequence[Item]) -> None:
        pass

    def take_counts(self) -> tuple[int, int]:
        return 0, 0

    def settled(self, acked: Sequence[Item], doubted: Sequence[Item],
                settled: Sequence[Item]) -> None:
        pass

    def close(self) -> None:
        self.advance()
        self.advanced = True

    def stop(self) -> None:
        if self.advanced:
            return
        self.advanced = True
        try:
            self.advance()
        except Exception as exc:  # the run's own error, if any, is the one raised
            log.warning("integration %s: the snapshot was not moved on over this run's "
                        "acknowledged users (the next run sends them again): %s",
                        self.integration, exc)
