"""Each row of a batch to its place in the run: skipped, packed or passed (`RowRouter`).

Invariants:
- a row an earlier attempt settled (`Skipper`) is skipped: neither sent, diffed nor counted
  again (the field diff would find its user's acknowledged record and count it unchanged on
  top of synced), its range handed to the cutter so progress moves over it;
- every other row is counted read once: an item is packed, a reject or an UNCHANGED row
  passed; the stages see a batch before its rows are packed;
- the rows of requests in flight at a crash (skip policy) are named in doubt once known.
"""

from __future__ import annotations

from collections.abc import Callable

from engage_sync.cursor.progress import Cursor
from engage_sync.items import UNCHANGED, Item, RowOutcome
from engage_sync.read.reader import RowBatch
from engage_sync.run.cutter import Cutter
from engage_sync.run.resume import Skipper
from engage_sync.run.stage import Stages
from engage_sync.state.records import JournalEntry
from engage_sync.state.row_errors import IN_FLIGHT_AT_CRASH, crash_position

Errors = list[tuple[str, str, str]]  # (position, row key, reason)


class RowRouter:
    """One attempt's batches, in source order, through the stages to the cutter."""

    def __init__(self, stages: Stages, cutter: Cutter, skipper: Skipper, crashed: set[int],
                 counts: dict[str, int], record_in_doubt: Callable[[Errors], None]) -> None:
        self.stages, self.cutter, self.skipper, self.crashed = stages, cutter, skipper, crashed
        self.counts, self.record_in_doubt = counts, record_in_doubt

    def route(self, rows: RowBatch) -> None:
        settled = self._settled_before(rows)
        self._stage(rows.outcomes, settled)
        self._take(rows, settled)

    def _stage(self, outcomes: list[RowOutcome], settled: list[JournalEntry | None] | None
               ) -> None:
        """The stages see only the rows this attempt may send."""
        if settled is None:
            self.stages.batch(outcomes)
            return
        shown = [None if entry is not None else o
                 for o, entry in zip(outcomes, settled, strict=True)]
        self.stages.batch(shown)
        for k, entry in enumerate(settled):
            if entry is None:
                outcomes[k] = shown[k]

    def _take(self, rows: RowBatch, settled: list[JournalEntry | None] | None) -> None:
        """One batch's rows, in order, to the cutter: skipped (`settled`: the entry an
        earlier attempt settled of each row), packed or passed."""
        crashed: Errors = []
        counts, cutter = self.counts, self.cutter
        for k, outcome in enumerate(rows.outcomes):
            if outcome is None:
                continue
            entry = settled[k] if settled is not None else None
            if entry is not None:  # settled by an earlier attempt: not sent again
                if isinstance(outcome, Item):
                    self.stages.skipped((outcome,))
                    if entry.req_no in self.crashed:
                        crashed.append(_crash_error(rows.cursor(k), outcome.key))
                cutter.skip(entry.start, tuple(entry.end))
            elif outcome is UNCHANGED:  # a stage found nothing to send: read, passed
                counts["read"] += 1
                counts["unchanged"] += 1
                cutter.passed(rows, k)
            elif isinstance(outcome, Item):
                counts["read"] += 1
                cutter.add(rows, k, outcome)
            else:
                counts["read"] += 1
                counts["rejected"] += 1
                cutter.passed(rows, k)
        if crashed:  # name the rows of requests in flight at a crash, once known
            self.record_in_doubt(crashed)

    def _settled_before(self, rows: RowBatch) -> list[JournalEntry | None] | None:
        """The entry an earlier attempt settled of each row of the batch (None: not settled),
        or None when no row of it was; the skipper is asked in source order, once a row."""
        skipper = self.skipper
        if not skipper:
            return None
        found = [skipper.settled(rows.cursor(k)) if o is not None and skipper else None
                 for k, o in enumerate(rows.outcomes)]
        return found if any(e is not None for e in found) else None


def _crash_error(cursor: Cursor, key: str) -> tuple[str, str, str]:
    return (crash_position(cursor), key, IN_FLIGHT_AT_CRASH)
