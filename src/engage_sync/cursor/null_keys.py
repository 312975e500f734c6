"""NULL key values in the source order: one rule, owned here.

A row's position is (cursor value, *key values). A key column may hold NULL (a missing
identifier), and a NULL must never reach an ordering or a comparison as None: Python cannot
order None against text, and in SQL `k > NULL` is NULL, so a stored cursor ending in NULL would
lose every later row sharing its `UPDATED_AT` on the next run.

The rule:
- in a cursor, a NULL key value is `NULL_KEY`, which sorts before every other value; the read
  query orders key columns NULLS FIRST and spells "after NULL" as IS NOT NULL and "equal to
  NULL" as IS NULL (`extract.build_query`), so SQL and Python agree on the order;
- a row with a NULL in a key column is rejected with a reason naming the column
  (`null_key_reasons`): without a key it cannot be told apart from its neighbours, so it could
  not be resumed, acknowledged or named reliably. Rows that tie on their whole position are
  then rejected rows only, and a request never ends between two of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa


class _NullKey:
    """The NULL of a key column inside a cursor: equal only to itself, below everything
    else."""

    _instance: _NullKey | None = None

    def __new__(cls) -> _NullKey:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NULL_KEY"

    def __reduce__(self) -> str:
        return "NULL_KEY"

    def __hash__(self) -> int:
        return hash("engage_sync.NULL_KEY")

    def __eq__(self, other: object) -> bool:
        return other is self

    def __lt__(self, other: object) -> bool:
        return other is not self

    def __le__(self, other: object) -> bool:
        return True

    def __gt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return other is self


NULL_KEY = _NullKey()


def position_value(value: Any) -> Any:
    """A value read from the source as it stands in a cursor: None → NULL_KEY."""
    return NULL_KEY if value is None else value


def null_key_reasons(batch: pa.RecordBatch, key_columns: Sequence[str]) -> dict[int, str]:
    """Row index → why the row is rejected, for rows with a NULL in a key column."""
    reasons: dict[int, str] = {}
    for name in key_columns:
        column = batch.column(name)
        if column.null_count == 0:
            continue
        reason = (f"key column {name} is NULL: a row without a key cannot be tracked; "
                  "give it a value in the source")
        for k, valid in enumerate(column.is_valid().to_pylist()):
            if not valid:
                reasons.setdefault(k, reason)
    return reasons
