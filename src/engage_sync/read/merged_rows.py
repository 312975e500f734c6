"""A user's rows of one read as one object: the payload format, whose rows each hold some of a
user's attributes (`SourceSpec.merged`, `Kind.merge`).

The user's first row read carries the merge; the rows after it are passed. The merge rides
on the first row, not the last, so that it is sent before the progress can pass any row it
covers: the cursor moves over the settled prefix in source order, so the rows it passes are
behind an object already acknowledged (or failed, or in doubt, as any row), and nothing needs
remembering across a crash.

Invariants:
- a row whose user has another row in the window (OTHER_ROWS > 0) and none read before it
  (EARLIER_ROWS = 0), and which is an item, is its user's carrier: its item becomes the merge
  of the items of every row of its user in the window, in the read's order, each key with the
  value of the last row that holds it (`Kind.merge`). Those rows are read again by one query
  per batch that has carriers (the window's query, restricted to their users, `CHUNK` users a
  query), and turned into items by the kind's transform as the read turns them: rejected rows,
  and rows with a NULL key, hold nothing of the merge;
- every later row of a merged user that is an item is UNCHANGED, counted as superseded; the
  points the merge saves (the keys the rows share) are counted at the carrier, so the rows'
  points are what was sent and what was saved;
- a user whose first row is not an item (rejected) is carried by its next item (`orphans`,
  kept while the read lasts: rejected first rows are few);
- a merge the kind refuses (too many attributes, too large) leaves the user's rows as they are,
  each sent in order, so the last value of each key still wins (`unmerged`, kept while the
  read lasts);
- a resumed run reads from its progress, and counts EARLIER_ROWS and OTHER_ROWS over what it
  reads again: a merged user's first row read again carries the merge of the rows from there
  on, which hold the latest value of every key they hold; the keys only the rows before it
  held were sent by the carrier before the progress passed them. So a resumed run ends with
  every profile at its latest values (keys sent before the crash may be sent again);
- the lookup is its own query, not the read's snapshot: a source changed between the two
  gives the merge of what the lookup saw, never less than the carrier's own row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.config.integration import Integration
from engage_sync.cursor.null_keys import null_key_reasons
from engage_sync.cursor.window import Window
from engage_sync.errors import SourceError
from engage_sync.items import UNCHANGED, Item, RowOutcome
from engage_sync.kinds import Kind
from engage_sync.read.driver_rows import rows_to_batch
from engage_sync.read.extract import (
    binary_ordered,
    build_query,
    connected,
    first_line,
    resolve_columns,
)
from engage_sync.read.source_spec import EARLIER_ROWS, OTHER_ROWS, SourceSpec

CHUNK = 2_000
"""Users a lookup query asks for at most (their values are bound parameters)."""

User = tuple[Any, ...]  # a row's user columns' values, as the warehouse gives them


class MergedRows:
    """Merges the rows of each user of one read (`Reader.batches` makes one per read)."""

    def __init__(self, integration: Integration, kind: Kind, engine: Engine, spec: SourceSpec,
                 window: Window) -> None:
        assert kind.merge is not None and spec.merged
        self.i, self.kind, self.engine, self.window = integration, kind, engine, window
        self.spec = spec
        self.orphans: set[User] = set()
        self.unmerged: set[User] = set()

    def apply(self, outcomes: list[RowOutcome], batch: pa.RecordBatch) -> tuple[int, int]:
        """Merge into the batch's carriers, pass their users' later rows; (rows passed, points
        saved)."""
        others = batch.column(OTHER_ROWS).to_pylist()
        if not any(others):  # no user of the batch has another row: nothing to merge or pass
            return 0, 0
        earlier = batch.column(EARLIER_ROWS).to_pylist()
        users: list[User] = list(zip(*(batch.column(c).to_pylist()
                                       for c in self.spec.superseded_by), strict=True))
        carriers: list[int] = []
        for k, outcome in enumerate(outcomes):
            if not others[k] or (earlier[k] and users[k] not in self.orphans):
                continue
            if isinstance(outcome, Item):
                self.orphans.discard(users[k])
                carriers.append(k)
            elif isinstance(outcome, tuple):
                self.orphans.add(users[k])
        saved = self._merge(outcomes, carriers, users) if carriers else 0
        firsts = set(carriers)
        passed = 0
        for k, outcome in enumerate(outcomes):
            if others[k] and k not in firsts and isinstance(outcome, Item) \
                    and users[k] not in self.unmerged and users[k] not in self.orphans:
                outcomes[k] = UNCHANGED
                passed += 1
        return passed, saved

    def _merge(self, outcomes: list[RowOutcome], carriers: list[int], users: list[User]
               ) -> int:
        """Each carrier's item replaced by its user's merge; the points the merges saved."""
        assert self.kind.merge is not None
        rows = self._rows([users[k] for k in carriers])
        saved = 0
        for k in carriers:
            item = outcomes[k]
            assert isinstance(item, Item)
            group = rows.get(users[k], [])
            merged = self.kind.merge(self.i, [item, *group])
            if isinstance(merged, str):
                self.unmerged.add(users[k])
                continue
            outcomes[k] = merged
            saved += max(0, sum(g.points for g in group) - merged.points) if group else 0
        return saved

    def _rows(self, users: Sequence[User]) -> dict[User, list[Item]]:
        """The window's items of these users, by user, in the read's order."""
        plain = replace(self.spec, superseded_by=(), merged=False)
        found: dict[User, list[Item]] = {}
        try:
            with connected(self.engine, plain) as conn:
                resolved = resolve_columns(conn, plain)
                binary = binary_ordered(conn, plain, resolved)
                query = build_query(plain, resolved, self.window, binary)
                for start in range(0, len(users), CHUNK):
                    chunk = list(dict.fromkeys(users[start:start + CHUNK]))
                    rows = conn.execute(query.where(self._among(resolved, chunk))).all()
                    if rows:
                        self._items(rows_to_batch(rows, plain.names), found)
        except sa.exc.SQLAlchemyError as exc:
            raise SourceError(f"integration {self.spec.integration}: reading the rows of "
                              f"users with several rows in the window failed: "
                              f"{first_line(exc)}") from exc
        return found

    def _among(self, resolved: dict[str, str], users: list[User]) -> sa.ColumnElement[bool]:
        columns: list[sa.ColumnClause[Any]] = [sa.column(resolved[c])
                                               for c in self.spec.superseded_by]
        if len(columns) == 1:
            return columns[0].in_([u[0] for u in users])
        return sa.tuple_(*columns).in_(users)

    def _items(self, batch: pa.RecordBatch, found: dict[User, list[Item]]) -> None:
        """The batch's rows as the read turns them into items, added by user in order."""
        users: list[User] = list(zip(*(batch.column(c).to_pylist()
                                       for c in self.spec.superseded_by), strict=True))
        bad = null_key_reasons(batch, self.i.key_columns)
        for item in self.kind.transform(self.i, batch, 0).items:
            if item.seq not in bad:
                found.setdefault(users[item.seq], []).append(item)
