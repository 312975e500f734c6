"""What the /users/track kinds share: row keys, the user reference of each row, payload
parsing, and the sink that collects one outcome per row. Pure.

Invariants: `Sink` holds exactly one Item or one Reject per row, row i with seq
`first_seq + i`; an item's blob is serialized once and fits in one request; reasons name
fields, never values.
"""

from __future__ import annotations

from typing import Any

import orjson

from engage_sync import validate as v
from engage_sync.config.integration import Integration
from engage_sync.items import (
    KEY_PART_MAX,
    Item,
    Reject,
    TransformResult,
    digest_part,
    json_blob,
    key_part,
)
from engage_sync.kinds.arrow_values import Columns

# A row's user reference: (field of the object, its JSON value, canonical user string).
Ref = tuple[str, Any, str]


def row_keys(cols: Columns, names: tuple[str, ...], hidden: frozenset[str], n: int
             ) -> list[str]:
    """Row keys as `render_key` makes them (payload columns as digests), column by column."""
    if not names:
        return [""] * n
    parts = [
        [digest_part(x) for x in cols.raw(name)] if name in hidden else
        [x if type(x) is str and len(x) <= KEY_PART_MAX else key_part(x) for x in cols.raw(name)]
        for name in names
    ]
    if len(parts) == 1:
        return parts[0]
    return ["|".join(row) for row in zip(*parts, strict=True)]


def id_text(value: Any) -> Any:
    """Integer ids (a common column type) are sent as their decimal string."""
    if type(value) is int:
        return str(value)
    return value


def references(integration: Integration, cols: Columns) -> list[Ref | str]:
    """Per row: the user reference, or the reason it is missing or invalid."""
    kind = integration.identifier_kind
    columns = integration.identifier_columns
    out: list[Ref | str] = []
    if kind == "user_alias":
        name_col, label_col = columns
        for name, label in zip(cols.raw(name_col), cols.raw(label_col), strict=True):
            name, label = id_text(name), id_text(label)
            if name is None or label is None:
                out.append(f"{name_col if name is None else label_col} is missing (NULL)")
                continue
            problem = v.check_alias(name, label, name_col, label_col)
            alias = {"alias_name": name, "alias_label": label}
            out.append(problem or ("user_alias", alias, f"user_alias:{label}:{name}"))
        return out
    (column,) = columns
    check = {"external_id": v.check_external_id, "platform_id": v.check_platform_id,
             "email": v.check_email, "phone": v.check_phone}[kind]
    lower = kind == "email"
    plain_id = kind in ("external_id", "platform_id")
    for value in cols.raw(column):
        if plain_id and type(value) is str and 0 < len(value) <= v.MAX_EXTERNAL_ID_LENGTH \
                and not value.isspace():
            out.append((kind, value, f"{kind}:{value}"))  # the common case, checked inline
            continue
        value = id_text(value)
        if value is None:
            out.append(f"{column} is missing (NULL)")
            continue
        problem = check(value, column)
        user = f"{kind}:{value.lower() if lower else value}" if problem is None else ""
        out.append(problem or (kind, value, user))
    return out


def parse_payload(raw: Any, column: str) -> dict[str, Any] | str:
    """The row's payload as a dict, or what is wrong with it. A JSON object, the common case,
    takes one `orjson.loads`; the checks below run only when that fails."""
    try:
        parsed = orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError):
        parsed = None
    if type(parsed) is dict:
        return parsed
    if raw is None:
        return f"{column} is missing (NULL)"
    if isinstance(raw, dict):
        return raw
    try:
        parsed = orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError):
        return f"{column} is not valid JSON"
    if not isinstance(parsed, dict):
        return f"{column} is not a JSON object"
    return parsed


def update_flag(integration: Integration) -> bool | None:
    """`_update_existing_only`: the integration's choice; false for aliases so they are created."""
    if integration.update_existing_only is not None:
        return integration.update_existing_only
    return False if integration.identifier_kind == "user_alias" else None


class Sink:
    """Collects one outcome per row, in row order."""

    def __init__(self, first_seq: int, keys: list[str], array: str, max_body_bytes: int) -> None:
        self.first_seq, self.keys, self.array = first_seq, keys, array
        self.max_body_bytes = max_body_bytes
        self.limit = max_body_bytes - v.REQUEST_OVERHEAD_BYTES
        self.items: list[Item] = []
        self.rejects: list[Reject] = []

    def reject(self, i: int, reason: str) -> None:
        self.rejects.append(Reject(self.first_seq + i, self.keys[i], reason))

    def item(self, i: int, user: str, obj: dict[str, Any]) -> None:
        try:
            blob = json_blob(obj)
        except (orjson.JSONEncodeError, TypeError):
            self.reject(i, "the object cannot be written as JSON (a value of unsupported type)")
            return
        if len(blob) > self.limit:
            self.reject(i, v.check_blob_size(len(blob), self.max_body_bytes) or "too large")
            return
        # billed data points: an event or a purchase is one; an attributes object, each key
        # but its identifier and the update flag
        points = 1 if self.array != "attributes" else len(obj) - (
            2 if "_update_existing_only" in obj else 1)
        self.items.append(Item(self.first_seq + i, self.keys[i], user, self.array, blob,
                               (), points))

    def result(self) -> TransformResult:
        return TransformResult(self.items, self.rejects)
