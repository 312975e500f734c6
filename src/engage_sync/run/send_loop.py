"""The send-and-settle loop: bounded concurrency, one user at a time, journal before send.

Invariants:
- a request's journal entry is committed before the request leaves (rule 4);
- two requests that touch the same user are never in flight at once;
- `Progress` moves only over a prefix of settled segments, and what it passes is saved in the
  same transaction as those segments' settlements;
- journal writes and settlements are grouped (`GROUP` requests per transaction) only for
  attribute runs, the high-volume kind whose objects are idempotent: after a crash, an entry
  journaled but never sent, or acknowledged but not yet saved, is sent again at no cost but
  billing. Every other kind has an exact journal: an entry is written only when its request
  can leave at once, so after a crash the only entries left pending are the ones really in
  flight, and the in-doubt policy decides about exactly those: nothing is lost and nothing the
  service processed is sent again. Requests wait in a queue until `admit` (half of
  `max_in_flight`) are packed, then as many as there is room for are journaled in one
  transaction with the settles of the requests that ended meanwhile: when the thread that
  packs is the slower side, half the transactions of one request each (a commit is the
  exact journal's main cost: `benchmarks/README.md`); when the service is, the loop waits for
  room for `admit` at most ADMIT_WAIT, and only while requests end more often than that (so
  that requests ending close together share a transaction); a slower service's requests leave
  as soon as one ends;
- an acknowledged request waits unsettled at most `SETTLE_WAIT` while the loop waits for room
  (and ADMIT_WAIT more while it waits for room for a group), or while it packs ahead;
- an exact journal packs ahead while the rate budget holds the requests in flight: up to
  `AHEAD` queued, unjournaled, leave at the speed of journal and send when it grants, not at
  the slower speed of read and pack (`benchmarks/README.md`); a crash leaves pending only the
  entries of requests in flight, and the cursor stops before the queued rows. With the queue
  full and the budget still holding, the loop does the run's idle work (`RunContext.idle`:
  the journal compacted so far) once per IDLE_EVERY requests settled.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from engage_sync.cursor.progress import Cursor, Progress, digest
from engage_sync.deliver.deliverer import Deliverer
from engage_sync.errors import FatalDeliveryError, LeaseLost, RateBudgetUnavailable, RunStopped
from engage_sync.items import Item, users_of
from engage_sync.pack.request import Request
from engage_sync.read.reader import key_values
from engage_sync.run.settlement import Outgoing, never_sent, refused, settlement_of
from engage_sync.state.fields import unknown_fields
from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.store import StateStore

log = logging.getLogger("engage_sync.run.send_loop")

GROUP = 32
SETTLE_WAIT = 0.05  # seconds an acknowledged request may wait unsettled while the loop waits
IDLE_EVERY = 1000  # requests settled between two rounds of idle work (`RunContext.idle`)
HOLD_LOOK = 0.01  # seconds between two looks at the rate budget while waiting for room
AHEAD = 500  # requests an exact journal packs ahead, unjournaled, while the budget holds
# (`SendLoop._packs_ahead`): about 50 KB each for events, per send loop (one per partition)
ADMIT_WAIT = 0.005  # seconds admission may wait for room for more than one request, when
# requests end more often than that (at the service's ceiling on loopback, one a millisecond)


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
    """Work done while the rate budget holds and nothing more may be packed ahead, once per
    IDLE_EVERY requests settled at most (the run's journal compacted so far)."""


class SendLoop:
    """Journals, sends and settles segments in order of submission."""

    def __init__(self, ctx: RunContext, progress: Progress) -> None:
        self.ctx = ctx
        self.progress = progress
        self.group = GROUP if ctx.group_commits else 1
        # exact journal: requests queued before they are journaled together (as many as
        # there is room for then)
        self.admit = max(1, ctx.max_in_flight // 2)
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
        self.settled = self.idle_at = 0  # requests settled; and when the idle work was done
        self.spacing = 2 * ADMIT_WAIT  # seconds between two requests' ends (a running mean)
        self.last_end = time.monotonic()

    @property
    def halted(self) -> bool:
        """Nothing more may be sent: credentials refused, the shared budget lost, or the run
        stopped (the deliverer's guard refused to send)."""
        return bool(self.fatal) or self.stopped is not None

    def submit(self, segment: Outgoing, req_no: int) -> None:
        assert segment.batch is not None
        if self.stopped is not None:
            raise self.stopped
        items = segment.batch.items
        keys = values = None
        if self.group == 1:  # exact journal: the items named if the request is left in flight
            keys = tuple(i.key for i in items)
            values = tuple(key_values(segment.sources, i.seq) for i in items)
        segment.entry = JournalEntry(req_no, segment.start, segment.end, len(items), keys=keys,
                                     key_values=values)
        self.progress.add(segment)
        self.queue.append(segment)
        if len(self.queue) >= (self.group if self.group > 1 else self.admit) \
                and not self._packs_ahead():
            self._flush_queue()

    def _packs_ahead(self) -> bool:
        """Exact journal: whether to pack the next request rather than send the queued ones,
        which is so while fewer than AHEAD are queued and a request in flight waits for the
        rate budget: the service's limit sets the pace then, not this thread, and what it packs
        meanwhile leaves at the speed of journal and send once the budget grants. What ended
        meanwhile is settled as while waiting for room (within SETTLE_WAIT)."""
        if self.group > 1 or len(self.queue) >= AHEAD or not self.ctx.budget_holds():
            return False
        self._collect_ended()
        self._save_if_due()
        return True

    def _collect_ended(self) -> None:
        """Take the settlements of the requests that ended, without waiting or saving."""
        self._collect({f for f in self.in_flight if f.done()}, save=False)

    def _save_if_due(self) -> None:
        """Settle what ended once the first of it has waited SETTLE_WAIT from its answer."""
        if self.unsaved and time.monotonic() >= self.unsaved_since + SETTLE_WAIT:
            self._save()

    def _idle(self) -> None:
        """The context's idle work, when IDLE_EVERY requests were settled since it was last
        done and the rate budget holds (the queue is full: `_packs_ahead` said no)."""
        if self.ctx.idle is None or self.settled - self.idle_at < IDLE_EVERY \
                or not self.ctx.budget_holds():
            return
        self.idle_at = self.settled
        if self.unsaved:  # settled first: the idle work may take longer than SETTLE_WAIT
            self._save()
        try:
            self.ctx.idle()
        except LeaseLost:
            raise
        except Exception as exc:  # housekeeping: the run's end does it again
            log.warning("[%s] the idle work failed, left to the run's end: %s",
                        self.ctx.integration, exc)

    def _flush_queue(self, whole: bool = False) -> None:
        """Send the queue; an exact journal stops when it may pack ahead again, unless
        `whole`."""
        if self.group == 1:
            while self.queue:
                self.queue = self._admit(self.queue, may_pack=not whole)
                if not whole and self._packs_ahead():
                    return
            return
        if not self.queue:
            return
        queue, self.queue = self.queue, []
        self.ctx.state.journal_pending(self.ctx.run_id, [s.entry for s in queue if s.entry],
                                       owner=self.ctx.owner)
        for segment in queue:
            users = self._users(segment)
            self._make_room(users)
            if not self.halted:  # else journaled, never sent: the next run sends it
                self._send(segment, users)

    def _admit(self, queue: list[Outgoing], may_pack: bool = False) -> list[Outgoing]:
        """Exact journal: once there is room for the first queued request, the longest prefix
        of `queue` there is room for now (the requests that ended taken first, without
        waiting), that shares no user with another of it or with a request in flight,
        journaled in one transaction with the settles of the requests that ended, then sent
        (so a pending entry is really in flight). Returns the rest of the queue."""
        self._collect_ended()
        first = self._users(queue[0])
        if not self.halted:
            if not self._make_room(first, may_pack):
                return queue
            self._more_room(min(len(queue), self.admit))
        if self.halted:  # nothing more leaves: the queue is dropped, unjournaled
            self._save()
            return []
        group = [(queue[0], first)]
        seen = set(first)
        for segment in queue[1:self.ctx.max_in_flight - len(self.in_flight)]:
            users = self._users(segment)
            if not (seen.isdisjoint(users) and self.users.keys().isdisjoint(users)):
                break
            group.append((segment, users))
            seen |= users
        self._save(pending=[s.entry for s, _ in group if s.entry is not None])
        for segment, users in group:
            self._send(segment, users)
        return queue[len(group):]

    def _more_room(self, want: int) -> None:
        """Wait for room for `want` requests, taking those that end, when requests end often
        enough that it should come within ADMIT_WAIT (and never longer): one transaction then
        journals them all, not one each as slots free one at a time. A slow service (requests
        ending further apart) is not waited for: its requests leave as soon as a slot frees."""
        missing = want - (self.ctx.max_in_flight - len(self.in_flight))
        if missing <= 0 or missing * self.spacing > ADMIT_WAIT:
            return
        deadline = time.monotonic() + ADMIT_WAIT
        while (self.in_flight and not self.halted
               and self.ctx.max_in_flight - len(self.in_flight) < want):
            left = deadline - time.monotonic()
            done = wait(self.in_flight, left, FIRST_COMPLETED).done if left > 0 else set()
            if not done:
                return
            self._collect(done, save=False)

    @staticmethod
    def _users(segment: Outgoing) -> frozenset[str]:
        assert segment.batch is not None
        return frozenset(u for item in segment.batch.items for u in users_of(item))

    def _make_room(self, users: frozenset[str], may_pack: bool = False) -> bool:
        """Wait until a request may be handed to the pool: none of its users submitted, and
        fewer than `max_in_flight` submitted when journaling is exact (so a pending entry is
        really in flight), or than max_in_flight + 2 groups otherwise (the pool's workers
        bound real concurrency; the extra keeps them busy while the next group is packed).
        With `may_pack`, returns False instead, looking every HOLD_LOOK, once the thread may
        pack ahead (`_packs_ahead`); else True once there is room."""
        limit = self.ctx.max_in_flight + (2 * self.group if self.group > 1 else 0)
        while self.in_flight and (len(self.in_flight) >= limit
                                  or any(u in self.users for u in users)):
            if self.group > 1:
                self._collect(wait(self.in_flight, return_when=FIRST_COMPLETED).done)
                continue
            if may_pack:
                if self._packs_ahead():
                    return False
                self._idle()
            # an acknowledged request waits unsettled at most SETTLE_WAIT from its answer
            # (others ending meanwhile are settled with it), not on a slow request
            left = HOLD_LOOK if may_pack else None
            if self.unsaved:
                settle_in = self.unsaved_since + SETTLE_WAIT - time.monotonic()
                left = settle_in if left is None else min(left, settle_in)
            done = wait(self.in_flight, left, FIRST_COMPLETED).done \
                if left is None or left > 0 else set()
            self._save_if_due()
            self._collect(done, save=False)
        return True

    def _send(self, segment: Outgoing, users: frozenset[str]) -> None:
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
        if not self.in_flight:  # time with nothing in flight is no gap between ends
            self.last_end = time.monotonic()
        self.in_flight[future] = (segment, users)
        for u in users:
            self.users[u] = self.users.get(u, 0) + 1
        self.ctx.counts["requests"] += 1

    def _collect(self, futures: set[Future[Any]], save: bool = True) -> None:
        """Take the ended requests' settlements; with `save`, settle once a group's worth
        waits (else the caller settles them before it waits again)."""
        now = time.monotonic()
        for future in futures:
            # the mean time between two requests' ends, over about the last ten
            self.spacing += 0.1 * (now - self.last_end - self.spacing)
            self.last_end = now
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
        if save and len(self.unsaved) >= self.group:
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
