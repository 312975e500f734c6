"""The send-and-settle loop's mechanics, shared by its two journaling modes.

A run's send loop is one of two subclasses of `SendLoop`, chosen once from the kind
(`run/journaling.py`): an exact journal (`run/exact_journal.py`, every kind but attributes)
or a grouped one (`run/grouped_journal.py`, attributes). They differ only in when requests are
journaled and settled; what they share is here: the pool of send threads, the users in flight,
how an ended request becomes a settlement, and the settle transaction.

Invariants, whichever the mode:
- a request's journal entry is committed before the request leaves (rule 4): a mode hands a
  request to `_send` only after the transaction that journals it;
- two requests that touch the same user are never in flight at once: a mode sends a request
  only once none of its users is in `users`;
- `Progress` moves only over a prefix of settled segments, and what it passes is saved in the
  same transaction as those segments' settlements (`_save`);
- a request the service refused (401/403) or that never left (the shared rate budget lost, a
  stop) is not settled: the cursor stops before it and the next run sends it; `drain` raises
  once everything sent is settled.
"""

from __future__ import annotations

import contextvars
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, ClassVar

from engage_sync.cursor.progress import Cursor, Progress, digest
from engage_sync.deliver.deliverer import Deliverer
from engage_sync.errors import FatalDeliveryError, RateBudgetUnavailable, RunStopped
from engage_sync.items import Item, users_of
from engage_sync.pack.request import Request
from engage_sync.run.settlement import Outgoing, never_sent, refused, settlement_of
from engage_sync.state.fields import unknown_fields
from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.store import StateStore


class FatalStop(FatalDeliveryError):
    """The service refused the credentials or permissions: the run stops."""


@dataclass
class RunContext:
    """What the sender needs to know of its run."""

    run_id: str
    integration: str
    state: StateStore
    deliverer: Deliverer
    max_in_flight: int
    group_commits: bool
    """The kind journals and settles in groups (`Kind.group_commits`): which mode sends."""
    resend_in_doubt: bool
    bulk: bool
    may_move_cursor: Callable[[Cursor], bool]
    counts: dict[str, int]
    report: Callable[[], None]
    on_settled: Callable[[Sequence[Item], Sequence[Item], Sequence[Item]], None] | None = None
    """Called after each settle transaction with the items the service acknowledged, those
    whose requests ended in doubt, then every item settled, in settle order
    (`run.stage.Stage.settled`)."""
    names_duplicates: bool = False
    """Resends of this run's requests may double rows (resend policy, kind not idempotent)."""
    owner: str | None = None
    """The run's owner: journal writes and settlements are fenced on it (`lease`)."""
    budget_holds: Callable[[], bool] = lambda: False
    """Whether a request in flight waits for the rate budget now (`Deliverer.budget_holds`;
    the default: never)."""
    idle: Callable[[], object] | None = None
    """Work done while the rate budget holds and nothing more may be packed ahead (the run's
    journal compacted so far; an exact journal's, `ExactSendLoop._idle`)."""


class SendLoop(ABC):
    """Journals, sends and settles segments in order of submission; a subclass decides when
    queued requests are journaled (`_queued`, `_flush_queue`) and what an entry names
    (`_entry`)."""

    save_every: ClassVar[int]
    """Settlements taken before `_collect` saves them (with `save`)."""

    def __init__(self, ctx: RunContext, progress: Progress) -> None:
        self.ctx = ctx
        self.progress = progress
        self.pool = ThreadPoolExecutor(max_workers=ctx.max_in_flight,
                                       thread_name_prefix=f"send-{ctx.integration}")
        self.queue: list[Outgoing] = []
        self.in_flight: dict[Future[Any], tuple[Outgoing, frozenset[str]]] = {}
        self.users: dict[str, int] = {}
        self.unsaved: list[tuple[Outgoing, Settlement]] = []
        self.unsaved_since = 0.0  # when the first of `unsaved` was taken (time.monotonic)
        self.fatal: str | None = None
        self.stopped: RateBudgetUnavailable | None = None
        self.unsent: list[int] = []  # journaled, then kept from leaving by a stop
        self.settled = 0  # requests settled

    @property
    def halted(self) -> bool:
        """Nothing more may be sent: credentials refused, the shared budget lost, or the run
        stopped (the deliverer's guard refused to send)."""
        return bool(self.fatal) or self.stopped is not None

    def submit(self, segment: Outgoing, req_no: int) -> None:
        assert segment.batch is not None
        if self.stopped is not None:
            raise self.stopped
        segment.entry = self._entry(segment, req_no)
        self.progress.add(segment)
        self.queue.append(segment)
        self._queued()

    @abstractmethod
    def _entry(self, segment: Outgoing, req_no: int) -> JournalEntry:
        """The journal entry of request `req_no` (`segment`)."""

    @abstractmethod
    def _queued(self) -> None:
        """A request joined the queue: send what is due."""

    @abstractmethod
    def _flush_queue(self, whole: bool = False) -> None:
        """Journal and send the queue (all of it with `whole`)."""

    @staticmethod
    def _users(segment: Outgoing) -> frozenset[str]:
        assert segment.batch is not None
        return frozenset(u for item in segment.batch.items for u in users_of(item))

    def _send(self, segment: Outgoing, users: frozenset[str]) -> None:
        """Hand a journaled request to the pool; none of `users` may be in flight."""
        batch = segment.batch
        assert batch is not None
        request = Request(
            endpoint=batch.endpoint, group=batch.group, body=batch.body, items=batch.items,
            positions=batch.positions, bulk=self.ctx.bulk,
            resend_in_doubt=self.ctx.resend_in_doubt,
        )
        # sent in a copy of this thread's context: what the sending thread logs belongs to the
        # run (a Prefect flow or task run, when there is one) that read the request's rows
        future = self.pool.submit(contextvars.copy_context().run, self.ctx.deliverer.send,
                                  request)
        self.in_flight[future] = (segment, users)
        for u in users:
            self.users[u] = self.users.get(u, 0) + 1
        self.ctx.counts["requests"] += 1

    def _collect(self, futures: set[Future[Any]], save: bool = True) -> None:
        """Take the ended requests' settlements; with `save`, settle once `save_every` wait
        (else the caller settles them before it waits again)."""
        for future in futures:
            segment, users = self.in_flight.pop(future)
            for u in users:
                self.users[u] -= 1
                if not self.users[u]:
                    del self.users[u]
            if (lost := never_sent(future)) is not None:
                # not settled: the cursor stops before it and the next run sends it
                self.stopped = self.stopped or lost
                if isinstance(lost, RunStopped) and segment.entry is not None:
                    self.unsent.append(segment.entry.req_no)
                continue
            if refused(future):
                # 401/403 (or refused unsent after one): nothing was processed. Not settled,
                # so the cursor stops before it and the next run sends it again.
                self.fatal = self.fatal or future.result().outcome.reason
                continue
            if not self.unsaved:
                self.unsaved_since = time.monotonic()
            self.unsaved.append((segment, settlement_of(
                segment, future, self.ctx.counts, self.ctx.integration,
                self.ctx.names_duplicates)))
            segment.settled = True
            segment.sources = ()  # the batches read may go
        if save and len(self.unsaved) >= self.save_every:
            self._save()

    def _save(self, pending: Sequence[JournalEntry] = ()) -> None:
        """Settle what ended and move the progress, and journal `pending` (requests about to
        be sent), in one transaction."""
        moved = self.progress.advance()
        if not self.unsaved and moved is None:
            if pending:
                self.ctx.state.journal_pending(self.ctx.run_id, pending, owner=self.ctx.owner)
            return
        acked = [(item.key, st, digest(item.blob))
                 for segment, _ in self.unsaved if segment.batch is not None
                 for item, st in zip(segment.batch.items, segment.stamps, strict=False)]
        delivered = [item for segment, _ in self.unsaved for item in segment.acked]
        self.ctx.state.settle(
            self.ctx.run_id, self.ctx.integration, [s for _, s in self.unsaved],
            progress=moved, move_cursor=moved is not None and self.ctx.may_move_cursor(moved),
            acked_rows=acked, acked_fields=self._fields(),
            points=sum(i.points for i in delivered), owner=self.ctx.owner, pending=pending)
        saved, self.unsaved = self.unsaved, []  # settled: never again, whatever a hook raises
        self.settled += len(saved)
        if self.ctx.on_settled is not None:
            self.ctx.on_settled(
                delivered, [i for s, t in saved if t.state == "in_doubt" and s.batch
                            for i in s.batch.items],
                [i for s, _ in saved if s.batch for i in s.batch.items])
        self.ctx.report()

    def _fields(self) -> list[tuple[str, bytes]]:
        """The field record's deltas of this save, in settle order: what the service
        acknowledged, and for a request in doubt each attribute as unknown (`unknown_fields`)."""
        out: list[tuple[str, bytes]] = []
        for segment, settlement in self.unsaved:
            if settlement.state == "in_doubt" and segment.batch is not None:
                out += [(i.user, unknown_fields(i.fields)) for i in segment.batch.items
                        if i.fields]
            else:
                out += [(i.user, i.fields) for i in segment.acked if i.fields]
        return out

    def drain(self) -> None:
        """Send what is queued, wait for everything in flight, save; raises FatalStop after a
        401 or 403 once everything sent is settled."""
        self._flush_queue(whole=True)
        while self.in_flight:
            self._collect(wait(self.in_flight, return_when=FIRST_COMPLETED).done)
        self._save()
        if self.stopped is not None:
            raise self.stopped
        if self.fatal:
            raise FatalStop(self.fatal)

    def settle_in_flight(self) -> None:
        """After an error elsewhere (the warehouse failed mid-window) or a stop: send nothing
        more, wait for the requests in flight and save how they ended, so none is left pending
        but those a stop kept from leaving, which are taken out of the journal."""
        self.queue = []
        while self.in_flight:
            self._collect(wait(self.in_flight, return_when=FIRST_COMPLETED).done)
        self._save()
        if self.unsent:
            self.ctx.state.forget_unsent(self.ctx.run_id, self.unsent, owner=self.ctx.owner)
            self.unsent = []

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
