"""Features plugged into the loop as stages: the loop calls their hooks, never asks which.

A stage sees one run through these hooks, in this order: `open` once; then for each batch read,
`batch` (after the batch's drops and rejects are recorded, before anything of it is packed;
the rows an earlier attempt of the run settled are None in the list it sees, so nothing is
counted twice), `skipped` for those items, and `take_counts` once the batch is handed on
(what the stage saved goes to the run's record); `settled` after every settle transaction
(interleaved with batches: the items acknowledged, those whose requests ended in doubt, and
every item settled); `close` once after the last settlement of a run that read its whole
window; `stop` always, last.

Invariants a stage keeps:
- `batch` rewrites outcomes in place and may only reduce an item or turn it into UNCHANGED
  (passed: the cursor moves over it, nothing is sent): never drop or add a row;
- what a stage records of a settlement is recorded after that settlement is durable;
- `stop` after a failed run records nothing the run did not settle.
The field diff (`diff.stage.Differ`) is the one stage today; `run.stages` picks a run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engage_sync.items import Item, RowOutcome


class Stage(Protocol):
    def open(self) -> None: ...

    def batch(self, outcomes: list[RowOutcome]) -> None: ...

    def skipped(self, items: Sequence[Item]) -> None: ...

    def take_counts(self) -> tuple[int, int]:
        """(rows it left unsent, data points it saved) since the last call."""
        ...

    def settled(self, acked: Sequence[Item], doubted: Sequence[Item],
                settled: Sequence[Item]) -> None: ...

    def close(self) -> None: ...

    def stop(self) -> None: ...


class Stages:
    """A run's stages, called in order (`stop` on every one, whatever the others raise)."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = tuple(stages)

    def open(self) -> None:
        for stage in self.stages:
            stage.open()

    def batch(self, outcomes: list[RowOutcome]) -> None:
        for stage in self.stages:
            stage.batch(outcomes)

    def skipped(self, items: Sequence[Item]) -> None:
        for stage in self.stages:
            stage.skipped(items)

    def take_counts(self) -> tuple[int, int]:
        counts = [stage.take_counts() for stage in self.stages]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    def settled(self, acked: Sequence[Item], doubted: Sequence[Item],
                settled: Sequence[Item]) -> None:
        for stage in self.stages:
            stage.settled(acked, doubted, settled)

    def close(self) -> None:
        for stage in self.stages:
            stage.close()

    def stop(self) -> None:
        errors: list[BaseException] = []
        for stage in self.stages:
            try:
                stage.stop()
            except Exception as exc:  # the others still stop; the first error is raised
                errors.append(exc)
        if errors:
            raise errors[0]
