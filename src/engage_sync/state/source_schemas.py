"""The source schema the schema guard last accepted, per integration.

Part of `StateStore` (a mixin using only `self.engine`). One row per integration, replaced
whole; it holds column names, type names and payload keys, never a value.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.state.schema import source_schemas, upsert


class SourceSchemas:
    """The StateStore's methods for the schema guard's record."""

    engine: Engine

    def source_schema(self, integration: str) -> dict[str, str] | None:
        """The schema the last accepted run saw, or None before the first."""
        with self.engine.connect() as conn:
            text = conn.scalar(sa.select(source_schemas.c.source_schema).where(
                source_schemas.c.integration == integration))
        return None if text is None else dict(orjson.loads(text))

    def record_source_schema(self, integration: str, schema: dict[str, str]) -> None:
        with self.engine.begin() as conn:
            upsert(conn, source_schemas, [{
                "integration": integration,
                "source_schema": orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode(),
                "recorded_at": datetime.now(UTC)}], update=("source_schema", "recorded_at"))
