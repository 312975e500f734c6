"""How a request ended, as the settlement the journal records; nothing of the loop's state.

Invariants: every row of a request that ended is counted once in `counts` (synced, failed or
in doubt); a settlement names each row it holds back (failed, in doubt, possibly doubled) with
its key values as the source holds them; a request that crashed in our own code leaves its
rows in doubt, never lost.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from engage_sync.cursor.progress import Segment
from engage_sync.deliver.doubled import resent_after_doubt
from engage_sync.errors import RateBudgetUnavailable
from engage_sync.items import Item
from engage_sync.pack.batching import Batch
from engage_sync.read.reader import RowBatch, key_values
from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.row_errors import (
    AFTER_DOUBT,
    item_of,
    request_position,
    unmapped_position,
)

log = logging.getLogger("engage_sync.run.send_loop")


@dataclass
class Outgoing(Segment):
    """A segment that is one request: its journal entry, its batch, with lookback the cursor
    stamp of each item (what the ack records) and, once answered, the items the service
    acknowledged (whose field digests and data points are recorded)."""

    entry: JournalEntry | None = None
    batch: Batch | None = None
    stamps: tuple[str, ...] = ()
    acked: tuple[Item, ...] = ()
    sources: tuple[RowBatch, ...] = ()
    """The batches its items were read from, until it is settled (their key values)."""


def never_sent(future: Future[Any]) -> RateBudgetUnavailable | None:
    """The shared rate budget was lost before the request left: the run must stop."""
    error = future.exception()
    return error if isinstance(error, RateBudgetUnavailable) else None


def refused(future: Future[Any]) -> bool:
    """The service refused the credentials (401/403): the request was not processed."""
    return future.exception() is None and future.result().outcome.kind == "fatal"


def _with_key_values(segment: Outgoing, settlement: Settlement) -> Settlement:
    """The settlement with the key values of the rows it names (failed, in doubt, doubled),
    read from the batches the request's items came from."""
    named = [*settlement.failed, *settlement.in_doubt, *settlement.duplicated]
    if not named or segment.batch is None:
        return settlement
    items = segment.batch.items
    values: dict[str, str | None] = {}
    for position, _, _ in named:
        k = item_of(position)
        if k is not None and k < len(items):
            values[position] = key_values(segment.sources, items[k].seq)
    return replace(settlement, key_values=values)


def settlement_of(segment: Outgoing, future: Future[Any], counts: dict[str, int],
                  integration: str, names_duplicates: bool) -> Settlement:
    """How the request ended (its rows counted in `counts`), with the rows that may be
    doubled (`deliver.doubled`) when `names_duplicates`, and the key values of every row
    named."""
    settlement = _ended(segment, future, counts, integration)
    if not names_duplicates or future.exception() is not None \
            or not resent_after_doubt(future.result()):
        return _with_key_values(segment, settlement)
    assert segment.batch is not None
    failed = {position for position, _, _ in settlement.failed}
    doubled = [(p, item.key, AFTER_DOUBT) for p, item in
               ((request_position(settlement.req_no, k), item)
                for k, item in enumerate(segment.batch.items)) if p not in failed]
    counts["duplicated"] = counts.get("duplicated", 0) + len(doubled)
    return _with_key_values(segment, replace(settlement, duplicated=doubled))


def _ended(segment: Outgoing, future: Future[Any], counts: dict[str, int],
           integration: str) -> Settlement:
    assert segment.batch is not None and segment.entry is not None
    items, req_no = segment.batch.items, segment.entry.req_no

    def rows(reason: str, errors: dict[int, str] | None = None
             ) -> list[tuple[str, str, str]]:
        errors = errors or {}
        return [(request_position(req_no, k), i.key, errors.get(k, reason))
                for k, i in enumerate(items)]

    try:
        outcome = future.result().outcome
    except Exception as exc:  # a bug or an unexpected library error: rows stay in doubt
        log.exception("integration %s: request %s crashed", integration, req_no)
        reason = f"internal error while sending: {type(exc).__name__}"
        counts["in_doubt"] += len(items)
        return Settlement(req_no, "in_doubt", 0, in_doubt=rows(reason), reason=reason)
    unmapped = _unmapped(req_no, outcome.unmapped_errors, integration)
    if outcome.kind == "ok":
        failed = [(request_position(req_no, k), items[k].key, reason)
                  for k, reason in sorted(outcome.item_errors.items())]
        counts["synced"] += len(items) - len(failed)
        counts["failed"] += len(failed)
        segment.acked = tuple(i for k, i in enumerate(items) if k not in outcome.item_errors)
        return Settlement(req_no, "acked", len(items) - len(failed), failed=failed,
                          unmapped=unmapped)
    if outcome.kind == "in_doubt":
        counts["in_doubt"] += len(items)
        return Settlement(req_no, "in_doubt", 0, in_doubt=rows(outcome.reason),
                          reason=outcome.reason)
    counts["failed"] += len(items)
    return Settlement(req_no, "failed", 0, failed=rows(outcome.reason, outcome.item_errors),
                      reason=outcome.reason, unmapped=unmapped)


def _unmapped(req_no: int, errors: tuple[str, ...], integration: str
              ) -> list[tuple[str, str, str]]:
    """Errors of an answer that name no item of the request: kept as the run's errors of
    kind `unmapped`, keyed by the request (none of its rows is known to be at fault)."""
    if errors:
        log.warning("integration %s: request %s: the service reported %d errors that name "
                    "no item of the request: %s", integration, req_no,
                    len(errors), "; ".join(errors[:3]))
    return [(unmapped_position(req_no, n), f"request {req_no}", error)
            for n, error in enumerate(errors)]
