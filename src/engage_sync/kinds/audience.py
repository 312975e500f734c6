"""`kind: audience`: users entering and leaving audiences, as /users/track attributes objects.
Pure.

A run reads memberships that changed, one row per (user, audience) pair, each marked entering
or leaving (the snapshot comparison makes them: `snapshot/audience.py`). Each row becomes one
attributes object of one key, so entering bills one data point, leaving one, staying nothing:
- `as: array`: `{"<attribute>": {"add": [name]}}` or `{"remove": [name]}`, the service's array
  operations, so the other names in the array (and names other tools added) stay;
- `as: boolean`: `{"<prefix><name>": true}` or `false` (a leaver's attribute is kept, false,
  so a segment can tell "left" from "never in").
Invariants: one Item or one Reject per row (`Sink`); reasons name columns, never values.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from engage_sync import validate as v
from engage_sync.config.audience import AudienceSection
from engage_sync.config.integration import Integration
from engage_sync.errors import SyncError
from engage_sync.items import TransformResult
from engage_sync.kinds.arrow_values import Columns
from engage_sync.kinds.base import Kind
from engage_sync.kinds.track import packer, user_column
from engage_sync.kinds.track_packer import ENDPOINT
from engage_sync.kinds.track_rows import Sink, id_text, references, row_keys, update_flag

MAX_NAME = 255
_RESERVED = frozenset({"external_id", "user_alias", "platform_id", "braze_id", "email", "phone",
                       "_update_existing_only", "subscription_groups"})


def section_of(integration: Integration) -> AudienceSection:
    section = integration.audience
    assert section is not None  # config: kind audience needs its section
    return section


def model_columns(integration: Integration) -> list[str]:
    """What the model must hold: the identifier column(s), and the name column if any."""
    name = section_of(integration).name_column
    return [*integration.identifier_columns, *([name] if name else [])]


def name_problem(name: object, section: AudienceSection, column: str) -> str | None:
    """Why an audience name cannot be sent, naming the column, or None."""
    if name is None:
        return f"{column} is missing (NULL): a row names one audience"
    if not isinstance(name, str) or not name.strip():
        return f"{column} is empty: a row names one audience"
    if len(name) > MAX_NAME:
        return f"{column} is longer than {MAX_NAME} characters (an audience name)"
    if section.as_ == "boolean":
        return v.check_attribute_name(section.attribute_of(name), _RESERVED)
    return None


def membership_transform(name_column: str, change_column: str, leaving: str
                         ) -> Callable[[Integration, pa.RecordBatch, int], TransformResult]:
    """The transform of changed memberships: the audience's name in `name_column`, and
    `change_column` equal to `leaving` for a pair that left."""

    def transform(integration: Integration, batch: pa.RecordBatch, first_seq: int
                  ) -> TransformResult:
        section = section_of(integration)
        shown = section.name_column or "audience.name"
        cols = Columns(batch)
        keys = row_keys(cols, integration.key_columns, integration.hidden_key_columns,
                        batch.num_rows)
        sink = Sink(first_seq, keys, "attributes", integration.service.limits.max_body_bytes)
        flag = update_flag(integration)
        names, changes = cols.raw(name_column), cols.raw(change_column)
        for i, ref in enumerate(references(integration, cols)):
            name = id_text(names[i])
            problem = ref if isinstance(ref, str) else name_problem(name, section, shown)
            if problem is not None:
                sink.reject(i, problem)
                continue
            assert not isinstance(ref, str)
            field, value, user = ref
            entering = changes[i] != leaving
            member: object = entering if section.as_ == "boolean" else (
                {"add" if entering else "remove": [name]})
            obj = {field: value, section.attribute_of(name): member}
            if flag is not None:
                obj["_update_existing_only"] = flag
            sink.item(i, user, obj)
        return sink.result()

    return transform


def _unread(integration: Integration, batch: pa.RecordBatch, first_seq: int
            ) -> TransformResult:
    raise SyncError(f"integration {integration.name}: an audience's rows are read through "
                    "its snapshot comparison, never directly")


def _track(_: Integration) -> str:
    return ENDPOINT


AUDIENCE = Kind(name="audience", rank=45, idempotent=True, columns=model_columns,
                transform=_unread, packer=packer, endpoint=_track, user_column=user_column)
"""The registered kind: what config and the plan ask of the model (its columns); a run reads
its changed memberships with `membership_transform` instead (a kind built per run)."""
