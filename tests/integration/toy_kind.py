"""A kind written the way a new one is: one module that builds a `Kind`, plus one registry line
(`kinds.register(TOUCHES)`). `touches` sets the attribute `last_touched` of each row's user
to the row's cursor value, through /users/track."""

from __future__ import annotations

import pyarrow as pa

from engage_sync.config.integration import Integration
from engage_sync.items import TransformResult
from engage_sync.kinds import Kind
from engage_sync.kinds.arrow_values import Columns
from engage_sync.kinds.rows import Outcomes, Rows
from engage_sync.kinds.track import packer


def columns(integration: Integration) -> list[str]:
    return list(integration.identifier_columns)


def transform(integration: Integration, batch: pa.RecordBatch, first_seq: int
              ) -> TransformResult:
    rows = Rows(batch)
    out = Outcomes(first_seq, rows.keys(integration.key_columns))
    (id_column,) = integration.identifier_columns
    times = Columns(batch).ready(integration.cursor_column)
    for i, user in enumerate(rows(id_column)):
        if user is None:
            out.reject(i, f"{id_column} is missing (NULL)")
        else:
            out.item(i, f"external_id:{user}", "attributes",
                     {"external_id": user, "last_touched": times[i]})
    return out.result()


TOUCHES = Kind(name="touches", rank=45, idempotent=True, columns=columns,
               transform=transform, packer=packer, endpoint=lambda _: "/users/track")
