"""Where a snapshot integration keeps its state in the warehouse, and the columns. Pure.

Two tables in the `snapshot.schema` of the integration's own warehouse:
- the snapshot: one row per user the service acknowledged, its identifier column(s), the
  digest of its whole row (`ROW`, what the comparison joins) and one digest per mapped
  attribute (NULL: the attribute holds no value of ours);
- the pending changes of the current run: the users whose result differs from the snapshot
  (new, changed, left), numbered by `SEQ`, with what to send of each attribute (`send`
  columns), the values, and the digests the snapshot takes once the service acknowledged them.
A digest column is named after the attribute (not its place in the mapping), so a mapping that
gains an attribute adds one column and keeps the others.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from engage_sync.config.integration import Integration

SEQ = "engage_seq"
"""The pending row's number: the order the run reads and the position the journal keeps."""
ROW = "engage_row"
"""The digest of a user's mapped attributes together (`snapshot.row_digest`)."""
CHANGE = "engage_change"
"""'new', 'changed' or 'left'."""
NEW, CHANGED, LEFT = "new", "changed", "left"


def _short(text: str, n: int) -> str:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:n]


@dataclass(frozen=True)
class Attribute:
    column: str
    """The model's column, as the mapping names it."""
    name: str
    """The service's attribute."""

    @property
    def digest(self) -> str:
        return f"engage_d_{_short(self.name, 12)}"

    @property
    def send(self) -> str:
        return f"engage_s_{_short(self.name, 12)}"


@dataclass(frozen=True)
class Layout:
    """One integration's snapshot tables and columns."""

    integration: str
    schema: str | None
    ids: tuple[str, ...]
    attributes: tuple[Attribute, ...]

    @property
    def snapshot_name(self) -> str:
        """`engage_snapshot_<name>_<hash>`: a readable name, unique per integration, within
        PostgreSQL's 63 characters with the pending table's suffix."""
        plain = re.sub(r"[^a-z0-9_]", "_", self.integration.lower())[:30]
        return f"engage_snapshot_{plain}_{_short(self.integration, 8)}"

    @property
    def pending_name(self) -> str:
        return f"{self.snapshot_name}_pending"

    def work(self, suffix: str, columns: tuple[str, ...]) -> sa.TableClause:
        """A table the comparison writes and drops while it makes the pending table."""
        return sa.table(f"{self.snapshot_name}_{suffix}", *(sa.column(c) for c in columns),
                        schema=self.schema)

    def snapshot(self) -> sa.TableClause:
        return sa.table(self.snapshot_name, *(sa.column(c) for c in self.ids),
                        sa.column(ROW), *(sa.column(a.digest) for a in self.attributes),
                        schema=self.schema)

    def pending(self) -> sa.TableClause:
        return sa.table(self.pending_name, *(sa.column(c) for c in (SEQ, *self._compared)),
                        schema=self.schema)

    def compared(self) -> sa.TableClause:
        """The users whose row differs, and what to send of each, while the pending table is
        made (those with something to send, numbered)."""
        return self.work("cmp", self._compared)

    @property
    def _compared(self) -> tuple[str, ...]:
        """A compared (or pending) user's columns: change, identifiers, values, row digest,
        attribute digests, what to send of each."""
        return (CHANGE, *self.ids, *(a.column for a in self.attributes), ROW,
                *(a.digest for a in self.attributes), *(a.send for a in self.attributes))

    def quoted(self, dialect: Any, name: str) -> str:
        """A table of this layout as SQL names it (schema-qualified)."""
        prep = dialect.identifier_preparer
        table = prep.quote(name)
        return f"{prep.quote_schema(self.schema)}.{table}" if self.schema else table


def layout_of(integration: Integration) -> Layout:
    """The layout of a `changes: snapshot` integration (mapped attributes)."""
    mapping = integration.mapping
    assert mapping is not None  # the config rule of `changes: snapshot`
    section = integration.snapshot
    return Layout(
        integration=integration.name,
        schema=section.schema_name if section is not None else None,
        ids=tuple(integration.identifier_columns),
        attributes=tuple(Attribute(c, n) for c, n in mapping.attributes.items()),
    )
