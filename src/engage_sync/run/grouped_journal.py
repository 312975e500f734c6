"""The grouped journal: attributes, the high-volume kind whose objects are idempotent.

Journal writes and settlements are grouped, `GROUP` requests a transaction: after a crash, an
entry journaled but never sent, or acknowledged but not yet saved, is sent again at no cost but
billing. So an entry need not be in flight to be pending, and names no items.

Invariants (with `send_loop`'s): a group is journaled in one transaction before any of its
requests leaves; at most `max_in_flight` plus two groups are submitted (the pool's workers
bound real concurrency; the extra keeps them busy while the next group is packed);
settlements are saved a group at a time, and the rest when the loop drains.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, wait

from engage_sync.run.send_loop import SendLoop
from engage_sync.run.settlement import Outgoing
from engage_sync.state.records import JournalEntry

GROUP = 32  # requests journaled, and settlements saved, in one transaction


class GroupedSendLoop(SendLoop):
    """Requests journaled and settled `GROUP` at a time."""

    save_every = GROUP

    def _entry(self, segment: Outgoing, req_no: int) -> JournalEntry:
        assert segment.batch is not None
        return JournalEntry(req_no, segment.start, segment.end, len(segment.batch.items))

    def _queued(self) -> None:
        if len(self.queue) >= GROUP:
            self._flush_queue()

    def _flush_queue(self, whole: bool = False) -> None:
        """Journal the whole queue in one transaction, then send it request by request."""
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

    def _make_room(self, users: frozenset[str]) -> None:
        """Wait, settling what ends a group at a time, until none of `users` is submitted and
        fewer than `max_in_flight` plus two groups are."""
        limit = self.ctx.max_in_flight + 2 * GROUP
        while self.in_flight and (len(self.in_flight) >= limit
                                  or any(u in self.users for u in users)):
            self._collect(wait(self.in_flight, return_when=FIRST_COMPLETED).done)
