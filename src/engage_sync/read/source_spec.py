"""What a read of the warehouse asks for: the table or query, its columns, and how its rows
are ordered and counted (`SourceSpec`). No I/O; `extract` builds the SQL from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engage_sync.read import key_digest


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """What to read: a table (optionally with schema) or a SQL query, and which columns."""

    integration: str
    table: str | None
    schema: str | None
    query: str | None
    cursor_column: str
    key_columns: tuple[str, ...]
    columns: tuple[str, ...]
    reader: str = "auto"
    null_cursor_oldest: bool = False
    """Rows with a NULL cursor value are read as if at OLDEST (`null_cursor: oldest`)."""
    digested: frozenset[str] = frozenset()
    """Key columns that hold payload: ordered by their digest (`key_digest`)."""
    partition_column: str | None = None
    """The column whose hash decides a row's partition (the user's key), if the kind can be
    partitioned."""
    superseded_by: tuple[str, ...] = ()
    """The user's columns (among `columns`), when each row also carries `LATER_ROWS`: 0 for a
    user's last row in the window, more than 0 for a row that rows of the same user follow
    (the warehouse counts them)."""
    merged: bool = False
    """With `superseded_by`: rows carry `EARLIER_ROWS` and `OTHER_ROWS` instead of
    `LATER_ROWS`, for a user's rows merged into its first row read (`read.merged_rows`)."""
    connect_args: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """`warehouse.connect_args`, expanded: the Arrow readers that connect on their own (ADBC)
    hand them to the driver too. Never shown (not in the repr)."""
    url: str = field(default="", repr=False, compare=False)
    """`warehouse.url`, its `${VAR}` references expanded: where the run's engine connects
    (`adapters/resources.py`). Never shown: it may hold a password."""

    @property
    def read_whole(self) -> bool:
        """Whether the window must be read in one query, never in slices: it is the config's
        SQL `query`, which might not give the same rows twice."""
        return self.query is not None

    @property
    def position_columns(self) -> list[str]:
        """The batch columns of a row's position: the cursor column, then each key column
        (or its digest column)."""
        return [self.cursor_column,
                *(key_digest.label(k) if k in self.digested else k for k in self.key_columns)]

    @property
    def names(self) -> list[str]:
        """Every column of a batch, in order: the configured columns, the digests, then
        LATER_ROWS when asked for (`superseded_by`), or EARLIER_ROWS and OTHER_ROWS
        (`merged`)."""
        return [*self.columns, *(key_digest.label(k) for k in self.key_columns
                                 if k in self.digested), *self.counted]

    @property
    def counted(self) -> list[str]:
        """The columns the warehouse adds that count a row's user's other rows."""
        if not self.superseded_by:
            return []
        return [EARLIER_ROWS, OTHER_ROWS] if self.merged else [LATER_ROWS]


LATER_ROWS = "engage_later_rows"
"""The batch column of `SourceSpec.superseded_by`: 0 for a user's last row in the window."""

EARLIER_ROWS = "engage_earlier_rows"
"""A batch column of `SourceSpec.merged`: 0 for the first row of its user the read gives (in
the read's order), more than 0 for the rows after it."""

OTHER_ROWS = "engage_other_rows"
"""A batch column of `SourceSpec.merged`: 0 for a user's only row in the window, more than 0
when the window holds another row of the same user."""
