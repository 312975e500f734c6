"""Cut a run's source order into segments: one per request, one per settled stretch.

Invariants:
- segments are contiguous and in source order: each starts where the previous one ended, so
  `Progress` can move over their settled prefix;
- a request ends at the last row whose item it holds or that was rejected before the next
  item: a reject between two requests is covered by the earlier one, so the cursor passes it
  only once that request settled;
- a stretch a resumed run skips (settled by an earlier attempt) is its own settled segment,
  and the request being packed is cut before it.
"""

from __future__ import annotations

from collections.abc import Callable

from engage_sync.cursor.progress import Cursor, Progress, Segment, stamp
from engage_sync.items import Item
from engage_sync.pack.batching import Batch, Packer
from engage_sync.read.reader import RowBatch
from engage_sync.run.settlement import Outgoing


class Cutter:
    """Feeds the packer in source order and hands each finished request to `submit`."""

    def __init__(self, packer: Packer, progress: Progress,
                 submit: Callable[[Outgoing, int], None], start: Cursor | None,
                 last_req_no: int, lookback: bool) -> None:
        self.packer, self.progress, self.submit = packer, progress, submit
        self.req_no = last_req_no
        self.segment_start = start
        self.lookback = lookback
        # the last row read: (batch, index), its cursor built only when a request is cut
        self.last_rows: RowBatch | None = None
        self.last_k = 0
        self.last_fixed: Cursor | None = None
        self.stamp_of: dict[int, str] = {}  # lookback: cursor stamp of each item not yet sent
        # the batches the items packed since the last cut came from (their key values)
        self.sources: list[RowBatch] = []

    def last(self) -> Cursor | None:
        return self.last_rows.cursor(self.last_k) if self.last_rows is not None \
            else self.last_fixed

    def add(self, rows: RowBatch, k: int, item: Item) -> None:
        """The next row, with an item to send."""
        if self.lookback:
            self.stamp_of[item.seq] = stamp(rows.cursor(k)[0])
        full = self.packer.add(item)
        if full is not None:
            self._send(full, self.last())
        if not self.sources or self.sources[-1] is not rows:
            self.sources.append(rows)  # after the cut: the item starts the next request
        self.passed(rows, k)

    def passed(self, rows: RowBatch, k: int) -> None:
        """The next row, with nothing to send (rejected)."""
        self.last_rows, self.last_k = rows, k

    def skip(self, start: Cursor | None, end: Cursor) -> None:
        """A stretch (start, end] settled before: cut the request being packed, then pass it."""
        self._send(self.packer.flush(), self.last())
        if self.last() != end:
            self.progress.add(Segment(start, end, settled=True))
        self.segment_start = self.last_fixed = end
        self.last_rows = None

    def finish(self) -> None:
        """Send what is packed; rows read after the last request (rejects) settle at once."""
        end = self.last()
        batch = self.packer.flush()
        if batch is not None:
            self._send(batch, end)
        elif end is not None and end != self.segment_start:
            self.progress.add(Segment(self.segment_start, end, settled=True))

    def _send(self, batch: Batch | None, end: Cursor | None) -> None:
        if batch is None or end is None:
            return
        self.req_no += 1
        stamps = tuple(self.stamp_of.pop(i.seq) for i in batch.items) if self.lookback else ()
        self.submit(Outgoing(self.segment_start, end, batch=batch, stamps=stamps,
                             sources=tuple(self.sources)), self.req_no)
        self.segment_start = end
        self.sources = []
