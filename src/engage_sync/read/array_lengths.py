"""The longest array each of some source columns holds, for the type check's `array_length`.

One aggregate query over the whole source (not a window: a run's window is not known before it
opens), only for columns mapped to an attribute the workspace types as an array of bounded
length; a dialect without a known array length function (or a failed query) answers nothing
for them, and the check leaves them alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.read.extract import first_line, source_of
from engage_sync.read.source_spec import SourceSpec

log = logging.getLogger(__name__)

_LENGTH = {"duckdb": "len", "postgresql": "cardinality"}  # an array's item count, by dialect


def longest(engine: Engine, spec: SourceSpec, columns: Sequence[str]) -> dict[str, int]:
    """column → the most items an array of it holds (columns of only NULLs left out)."""
    fn = _LENGTH.get(engine.dialect.name)
    if fn is None or not columns:
        return {}
    query = sa.select(*(sa.func.max(getattr(sa.func, fn)(sa.column(c))) for c in columns)
                      ).select_from(source_of(spec))
    try:
        with engine.connect() as conn:
            row = conn.execute(query).one()
    except sa.exc.SQLAlchemyError as exc:
        log.warning("integration %s: the array lengths were not checked: %s",
                    spec.integration, first_line(exc))
        return {}
    return {c: int(n) for c, n in zip(columns, row, strict=True) if n is not None}
