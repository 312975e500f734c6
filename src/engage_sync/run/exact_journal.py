"""The exact journal: every kind whose requests are not idempotent, or not numerous enough to
group (events, purchases, subscriptions, identity).

An entry is written only when its request can leave at once, so after a crash the only entries
left pending are the ones really in flight, and the in-doubt policy decides about exactly
those: nothing is lost and nothing the service processed is sent again. Each entry names its
items (keys and key values), so that those left in flight can be listed.

Invariants (with `send_loop`'s):
- fewer than `max_in_flight` requests are submitted when one is journaled, and none of its
  users, so a pending entry is really in flight;
- requests wait in a queue until `admit` (half of `max_in_flight`) are packed, then as many as
  there is room for are journaled in one transaction with the settles of the requests that
  ended meanwhile: when the thread that packs is the slower side, half the transactions of one
  request each (a commit is an exact journal's main cost); when the service is, the loop waits
  for room for `admit` at most ADMIT_WAIT, and only while requests end more often than that
  (so that requests ending close together share a transaction); a slower service's requests
  leave as soon as one ends;
- an acknowledged request waits unsettled at most `SETTLE_WAIT` while the loop waits for room
  (and ADMIT_WAIT more while it waits for room for a group), or while it packs ahead;
- it packs ahead while the rate budget holds the requests in flight: up to `AHEAD` queued,
  unjournaled, leave at the speed of journal and send when it grants, not at the slower speed
  of read and pack; a crash leaves pending only the entries of requests in flight, and the
  cursor stops before the queued rows. With the queue full and the budget still holding, the
  loop does the run's idle work (`RunContext.idle`: the journal compacted so far) once per
  IDLE_EVERY requests settled.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from engage_sync.cursor.progress import Progress
from engage_sync.errors import LeaseLost
from engage_sync.read.reader import key_values
from engage_sync.run.send_loop import RunContext, SendLoop
from engage_sync.run.settlement import Outgoing
from engage_sync.state.records import JournalEntry

log = logging.getLogger("engage_sync.run.send_loop")  # the send loop's lines, either mode

SETTLE_WAIT = 0.05  # seconds an acknowledged request may wait unsettled while the loop waits
IDLE_EVERY = 1000  # requests settled between two rounds of idle work (`RunContext.idle`)
HOLD_LOOK = 0.01  # seconds between two looks at the rate budget while waiting for room
AHEAD = 500  # requests packed ahead, unjournaled, while the budget holds (`_packs_ahead`):
# about 50 KB each for events, per send loop (one per partition)
ADMIT_WAIT = 0.005  # seconds admission may wait for room for more than one request, when
# requests end more often than that (at the service's ceiling on loopback, one a millisecond)


class ExactSendLoop(SendLoop):
    """A request journaled only when it can leave at once, its items named in its entry."""

    save_every = 1

    def __init__(self, ctx: RunContext, progress: Progress) -> None:
        super().__init__(ctx, progress)
        # requests queued before they are journaled together (as many as there is room for)
        self.admit = max(1, ctx.max_in_flight // 2)
        self.idle_at = 0  # `settled` when the idle work was last done
        self.spacing = 2 * ADMIT_WAIT  # seconds between two requests' ends (a running mean)
        self.last_end = time.monotonic()

    def _entry(self, segment: Outgoing, req_no: int) -> JournalEntry:
        """The items named, for the case the request is left in flight."""
        assert segment.batch is not None
        items = segment.batch.items
        return JournalEntry(req_no, segment.start, segment.end, len(items),
                            keys=tuple(i.key for i in items),
                            key_values=tuple(key_values(segment.sources, i.seq) for i in items))

    def _queued(self) -> None:
        if len(self.queue) >= self.admit and not self._packs_ahead():
            self._flush_queue()

    def _packs_ahead(self) -> bool:
        """Whether to pack the next request rather than send the queued ones, which is so
        while fewer than AHEAD are queued and a request in flight waits for the rate budget:
        the service's limit sets the pace then, not this thread, and what it packs meanwhile
        leaves at the speed of journal and send once the budget grants. What ended meanwhile
        is settled as while waiting for room (within SETTLE_WAIT)."""
        if len(self.queue) >= AHEAD or not self.ctx.budget_holds():
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
        """Send the queue; stops when it may pack ahead again, unless `whole`."""
        while self.queue:
            self.queue = self._admit(self.queue, may_pack=not whole)
            if not whole and self._packs_ahead():
                return

    def _admit(self, queue: list[Outgoing], may_pack: bool = False) -> list[Outgoing]:
        """Once there is room for the first queued request, the longest prefix of `queue`
        there is room for now (the requests that ended taken first, without waiting), that
        shares no user with another of it or with a request in flight, journaled in one
        transaction with the settles of the requests that ended, then sent (so a pending entry
        is really in flight). Returns the rest of the queue."""
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

    def _make_room(self, users: frozenset[str], may_pack: bool = False) -> bool:
        """Wait until a request may be handed to the pool: none of its users submitted, and
        fewer than `max_in_flight` submitted (so a pending entry is really in flight). With
        `may_pack`, returns False instead, looking every HOLD_LOOK, once the thread may pack
        ahead (`_packs_ahead`); else True once there is room."""
        while self.in_flight and (len(self.in_flight) >= self.ctx.max_in_flight
                                  or any(u in self.users for u in users)):
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
        was_idle = not self.in_flight  # time with nothing in flight is no gap between ends
        super()._send(segment, users)
        if was_idle:
            self.last_end = time.monotonic()

    def _collect(self, futures: set[Future[Any]], save: bool = True) -> None:
        now = time.monotonic()
        for _ in futures:
            # the mean time between two requests' ends, over about the last ten
            self.spacing += 0.1 * (now - self.last_end - self.spacing)
            self.last_end = now
        super()._collect(futures, save)
