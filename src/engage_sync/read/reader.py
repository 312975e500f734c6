"""Read and transform a window: Arrow batches from the warehouse, each row turned by its kind
into an item or a reject, and rows that need no sending dropped.

Invariants:
- batches come in source order, and each row of a batch has exactly one outcome: an `Item`, a
  (key, reason) reject, or None for a row dropped because it needs no sending (lookback: the
  same content was acknowledged before; backfill of events: an incremental run sent it or will);
- the rejects of a batch are handed to `on_rejects` (to be made durable) before the batch is
  yielded, so the cursor can never pass a reject that is not recorded;
- with `superseded_rows: skip` (`Kind.superseded_by`), an item whose user has a later row in
  the window is UNCHANGED (passed, not sent; its points counted as saved): the later row holds
  every mapped attribute, so the service's net result is the same. A resumed run counts later
  rows over what it reads again only, so a user's last row is never passed unsent;
- in the payload format (`Kind.merges`), whose rows each hold some keys, a user's rows are
  merged into its first row read instead, the rows after it UNCHANGED (`merged_rows`);
- stages (`run.stage`: the field diff) see a batch only after it is yielded, so they see
  items left after the drops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlalchemy.engine import Engine

from engage_sync.cursor.null_keys import null_key_reasons, position_value
from engage_sync.cursor.progress import REJECTED, Cursor, digest, encode_cursors, stamp
from engage_sync.cursor.ties import Ties
from engage_sync.cursor.window import Window
from engage_sync.items import UNCHANGED, Item, RowOutcome, Unchanged
from engage_sync.read.extract import stream_batches
from engage_sync.read.merged_rows import MergedRows
from engage_sync.read.newer_rows import newer_elsewhere
from engage_sync.read.plan import RunPlan
from engage_sync.read.sent_rows import SentRows
from engage_sync.read.source_spec import LATER_ROWS
from engage_sync.state.row_errors import reject_position
from engage_sync.state.store import StateStore

Rejects = list[tuple[str, str, str]]  # (position, row key, reason)


class RowBatch:
    """One transformed Arrow batch: an outcome per row and the rows' cursors, built only when
    asked (most rows never need theirs). Row k has seq `first_seq + k`."""

    def __init__(self, columns: list[Any], num_rows: int, first_seq: int = 0) -> None:
        self.columns = columns
        self.outcomes: list[RowOutcome] = [None] * num_rows
        self.first_seq = first_seq
        self._all: list[Cursor] | None = None
        self._keys: list[str] | None = None
        self.superseded = 0  # rows passed for a later row of the same user, and their points
        self.superseded_points = 0

    def cursor(self, k: int) -> Cursor:
        if self._all is not None:
            return self._all[k]
        return tuple(position_value(column[k].as_py()) for column in self.columns)

    def key_text(self, k: int) -> str:
        """Row k's key columns' values, encoded as a cursor; the batch's are encoded together
        the first time one is asked (an exact journal asks for every row's)."""
        if self._keys is None:
            if self._all is not None:
                keys = [c[1:] for c in self._all]
            else:  # the key columns only: the cursor column's datetimes are the costly part
                keys = list(zip(*(_positions(c) for c in self.columns[1:]), strict=True))
            self._keys = encode_cursors(keys)
        return self._keys[k]

    def cursors(self) -> list[Cursor]:
        if self._all is None:
            self._all = list(zip(*(_positions(c) for c in self.columns), strict=True))
        return self._all


def _positions(column: Any) -> list[Any]:
    """A column's values as they stand in cursors (NULL as NULL_KEY)."""
    values = column.to_pylist()
    return values if column.null_count == 0 else [position_value(v) for v in values]


def key_values(sources: Sequence[RowBatch], seq: int) -> str | None:
    """The declared key columns' values of row `seq` as they are in the source (a payload key
    column as its MD5), JSON as cursors are encoded; None when no batch of `sources` holds
    the row."""
    for rows in sources:
        k = seq - rows.first_seq
        if 0 <= k < len(rows.outcomes):
            return rows.key_text(k)
    return None


@dataclass
class Drops:
    """Rows a run does not send again.

    lookback: the run re-reads a trailing period; every row's end is remembered (acks), and
        rows at or below `stored` (the cursor when the run opened) whose content was
        acknowledged before are dropped.
    sent: a backfill of events drops the rows incremental runs sent (`sent_rows`), and rows
        above their cursor when those were read (`SentRows.top`: the next incremental run
        sends those).
    only: a retry of one request's items reads only their row keys.
    newest_by: the user's columns when a user's newest row wins (attributes): a window with
        an `until` (a retry) passes rows whose user has a row after it (`newer_rows`).
    """

    lookback: bool = False
    stored: Cursor | None = None
    sent: SentRows | None = None
    only: frozenset[str] | None = None
    newest_by: tuple[str, ...] = ()


class Reader:
    """Reads one integration's window as `RowBatch`es in source order."""

    def __init__(self, plan: RunPlan, engine: Engine, state: StateStore, drops: Drops) -> None:
        self.i, self.kind, self.spec = plan.integration, plan.kind, plan.spec
        self.engine, self.state, self.drops = engine, state, drops

    def batches(self, window: Window, on_rejects: Callable[[Rejects], None] | None = None
                ) -> Iterator[RowBatch]:
        seq, ties = 0, Ties()
        newer = newer_elsewhere(self.engine, self.spec, window, self.drops.newest_by)
        merged = MergedRows(self.i, self.kind, self.engine, self.spec, window) \
            if self.spec.merged else None
        for batch in stream_batches(self.engine, self.spec, window, self.i.extract_batch_rows):
            rows = self._transform(batch, seq)
            if self.drops.only is not None:
                _keep_only(rows, self.drops.only)
            if merged is not None:
                passed, saved = merged.apply(rows.outcomes, batch)
                rows.superseded += passed
                rows.superseded_points += saved
            later_rows = bool(self.spec.superseded_by) and merged is None
            if later_rows or newer:
                later = batch.column(LATER_ROWS).to_pylist() if later_rows \
                    else [0] * batch.num_rows
                _pass_superseded(rows, later, newer)
            if self.drops.lookback and self.drops.stored is not None:
                self._drop_acknowledged(rows)
            if self.drops.sent is not None:
                self._drop_sent(rows)
            self._record_rejects(rows, on_rejects, ties)
            yield rows
            seq += batch.num_rows

    def _transform(self, batch: pa.RecordBatch, seq: int) -> RowBatch:
        """One outcome per row: the kind's item or reject; a row with a NULL key is rejected
        (`null_keys`) unless the kind rejected it already."""
        result = self.kind.transform(self.i, batch, seq)
        assert len(result.items) + len(result.rejects) == batch.num_rows, "a row was lost"
        rows = RowBatch([batch.column(n) for n in self.spec.position_columns], batch.num_rows,
                        seq)
        for item in result.items:
            rows.outcomes[item.seq - seq] = item
        for reject in result.rejects:
            rows.outcomes[reject.seq - seq] = (reject.key, reject.reason)
        for k, reason in null_key_reasons(batch, self.i.key_columns).items():
            outcome = rows.outcomes[k]
            if isinstance(outcome, Item):
                rows.outcomes[k] = (outcome.key, reason)
        return rows

    def _record_rejects(self, rows: RowBatch, on_rejects: Callable[[Rejects], None] | None,
                        ties: Ties) -> None:
        """Make the batch's rejects durable, each at its own position (`ties`)."""
        rejects = [(k, o) for k, o in enumerate(rows.outcomes) if isinstance(o, tuple)]
        if not rejects or on_rejects is None:
            ties.pass_over(rows.cursor, len(rows.outcomes))
            return
        ordinals = ties.number(rows.cursors())
        on_rejects([(reject_position(rows.cursor(k), ordinals[k]), o[0], o[1])
                    for k, o in rejects])
        if self.drops.lookback:
            self.state.record_acks(self.i.name, [
                (o[0], stamp(rows.cursor(k)[0]), REJECTED) for k, o in rejects])

    def _drop_sent(self, rows: RowBatch) -> None:
        """Backfill of events: rows an incremental run sent, or will send, are not read."""
        sent = self.drops.sent
        assert sent is not None
        top = sent.top
        asked: list[int] = []  # rows at or below `top`: dropped if the journal says sent
        pairs: list[tuple[Cursor, str]] = []
        for k, c in enumerate(rows.cursors()):
            outcome = rows.outcomes[k]
            if outcome is None or isinstance(outcome, Unchanged):  # (stages come after)
                continue
            if top is None or tuple(c) > tuple(top):
                rows.outcomes[k] = None
                continue
            asked.append(k)
            pairs.append((tuple(c), outcome.key if isinstance(outcome, Item) else outcome[0]))
        for k, was_sent in zip(asked, sent.contains_many(pairs), strict=True):
            if was_sent:
                rows.outcomes[k] = None

    def _drop_acknowledged(self, rows: RowBatch) -> None:
        """Lookback: rows at or below the stored cursor whose (key, cursor value, content)
        was acknowledged before are not read again."""
        below = tuple(self.drops.stored or ())
        cursors, outcomes = rows.cursors(), rows.outcomes
        old = [k for k, c in enumerate(cursors) if tuple(c) <= below]
        if not old:
            return
        keys = [o.key if isinstance(o, Item) else o[0] for o in (outcomes[k] for k in old)
                if isinstance(o, Item | tuple)]
        known = self.state.acked(self.i.name, keys)
        for k in old:
            o = outcomes[k]
            if not isinstance(o, Item | tuple):  # dropped (stages run after the drops)
                continue
            key, mark = (o.key, digest(o.blob)) if isinstance(o, Item) else (o[0], REJECTED)
            if (key, stamp(cursors[k][0]), mark) in known:
                outcomes[k] = None


def _keep_only(rows: RowBatch, keys: frozenset[str]) -> None:
    """A retry of one request's items: every other row of its range is dropped unread."""
    for k, outcome in enumerate(rows.outcomes):
        key = outcome.key if isinstance(outcome, Item) else \
            outcome[0] if isinstance(outcome, tuple) else None
        if key is not None and key not in keys:
            rows.outcomes[k] = None


def _pass_superseded(rows: RowBatch, later: list[int | None],
                     newer: frozenset[str] = frozenset()) -> None:
    """Items of users with a later row in the window, or (a retry) keyed in `newer`, become
    UNCHANGED, counted as saved."""
    for k, outcome in enumerate(rows.outcomes):
        if isinstance(outcome, Item) and (later[k] or outcome.key in newer):
            rows.outcomes[k] = UNCHANGED
            rows.superseded += 1
            rows.superseded_points += outcome.points
