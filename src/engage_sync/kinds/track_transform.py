"""Arrow record batches → /users/track objects (items) and refused rows (rejects). Pure.

Invariants:
- every row of the batch ends as exactly one `Item` or exactly one `Reject`, and row `i` has
  `seq = first_seq + i`; items and rejects each come out in row order;
- an item's `blob` is its object serialized once with orjson, and fits in one request;
- a reject's reason names the field and the rule, never a value of the row.

Columns are read once each (`to_pylist`) and converted to JSON-ready values by their Arrow type:
timestamps → ISO 8601 in UTC with `Z` (naive means UTC), dates → ISO dates, decimals → floats.
A column named in the integration but missing from the batch raises `SourceError`.

Nulls: an SQL NULL attribute is sent as JSON null (unset); a null event or purchase property
(SQL NULL or JSON null) means the property is absent and is left out; a NULL state of a
`mapping.subscription_groups` entry leaves that group out of the row's `subscription_groups`.
"""


from __future__ import annotations

from typing import Any

import pyarrow as pa

from engage_sync import validate as v
from engage_sync.config.integration import Integration
from engage_sync.items import TransformResult
from engage_sync.kinds.arrow_values import Columns, iso_utc
from engage_sync.kinds.subscriptions import track_groups
from engage_sync.kinds.track_events import events
from engage_sync.kinds.track_rows import (
    Ref,
    Sink,
    parse_payload,
    references,
    row_keys,
    update_flag,
)

__all__ = ["iso_utc", "transform_batch"]

_ATTRIBUTE_RESERVED = frozenset(
    {"external_id", "user_alias", "platform_id", "braze_id", "_update_existing_only"}
)
_PHONE_EVENTS = (
    "phone cannot identify events or purchases (the interface gives them no phone reference); "
    "use external_id, user_alias, platform_id or email"
)


def transform_batch(
    integration: Integration, batch: pa.RecordBatch, first_seq: int
) -> TransformResult:
    """Turn one batch into items and rejects; row i gets seq first_seq + i.

    Raises SourceError when a configured column is not in the batch.
    """
    cols = Columns(batch)
    keys = row_keys(cols, integration.key_columns, integration.hidden_key_columns,
                    batch.num_rows)
    sink = Sink(first_seq, keys, integration.kind, integration.service.limits.max_body_bytes)
    refs = references(integration, cols)
    if integration.kind == "attributes":
        _attributes(integration, cols, refs, sink)
    elif integration.identifier_kind == "phone":
        for i, ref in enumerate(refs):
            sink.reject(i, ref if isinstance(ref, str) else _PHONE_EVENTS)
    else:
        events(integration, cols, refs, sink)
    return sink.result()


# --- attributes ------------------------------------------------------------------------------


def _attributes(
    integration: Integration, cols: Columns, refs: list[Ref | str], sink: Sink
) -> None:
    reserved = _ATTRIBUTE_RESERVED | {integration.identifier_kind}
    if integration.payload_format is not None:
        _payload_attributes(integration, cols, refs, sink, reserved)
    else:
        _mapped_attributes(integration, cols, refs, sink, reserved)


def _payload_attributes(integration: Integration, cols: Columns, refs: list[Ref | str],
                        sink: Sink, reserved: frozenset[str]) -> None:
    flag = update_flag(integration)
    fmt = integration.payload_format
    assert fmt is not None
    column = fmt.payload_column
    payloads = cols.ready(column)
    plain: set[str] = set()  # names this batch found good, with no rule on their values
    for i, ref in enumerate(refs):
        if isinstance(ref, str):
            sink.reject(i, ref)
            continue
        payload = parse_payload(payloads[i], column)
        if isinstance(payload, str):
            sink.reject(i, payload)
            continue
        problem = _payload_attributes_problem(payload, reserved, plain)
        if problem is not None:
            sink.reject(i, problem)
            continue
        field, value, user = ref
        obj = {field: value, **payload}
        if flag is not None:
            obj["_update_existing_only"] = flag
        sink.item(i, user, obj)


def _mapped_attributes(integration: Integration, cols: Columns, refs: list[Ref | str],
                       sink: Sink, reserved: frozenset[str]) -> None:
    flag = update_flag(integration)
    assert integration.mapping is not None
    mapped = integration.mapping.attributes
    groups = integration.mapping.subscription_groups
    if groups:
        reserved |= {"subscription_groups"}
    names = list(mapped.values())
    static = v.check_attribute_count(len(names)) or next(
        (p for p in (v.check_attribute_name(n, reserved) for n in names) if p), None
    )
    columns = [cols.ready(c) for c in mapped]
    bad = _bad_attribute_values(cols, mapped)
    entries = track_groups(groups, cols.raw, len(refs)) if groups else None
    for i, row in enumerate(zip(*columns, strict=True) if columns else [()] * len(refs)):
        ref = refs[i]
        sub = entries[i] if entries is not None else None
        problem = ref if isinstance(ref, str) else static or bad.get(i) or (
            sub if isinstance(sub, str) else None)
        if problem is not None:
            sink.reject(i, problem)
            continue
        assert not isinstance(ref, str)
        field, value, user = ref
        obj = {field: value}
        obj.update(zip(names, row, strict=True))
        if sub:
            obj["subscription_groups"] = sub
        if flag is not None:
            obj["_update_existing_only"] = flag
        sink.item(i, user, obj)


def _payload_attributes_problem(payload: dict[str, Any], reserved: frozenset[str],
                                plain: set[str]) -> str | None:
    """JSON values can be bad only as objects (array operations) or as standard fields of a
    fixed shape (`validate.FIELD_CHECKS`); the rest is checked by name. `plain`: names already
    found good that no value rule applies to (one transform's, so one `reserved`); a payload
    of only those, with no object value, is good without a check per name (rows of one source
    share their names)."""
    if len(payload) > v.MAX_ATTRIBUTES_PER_ROW:
        return v.check_attribute_count(len(payload))
    if plain.issuperset(payload) and dict not in map(type, payload.values()):
        return None
    for name, value in payload.items():
        if not name or name[0] == "$" or name in reserved:
            return v.check_attribute_name(name, reserved)
        if (type(value) is dict or name in v.FIELD_CHECKS) and (
                problem := v.check_attribute_value(name, value)):
            return problem
    plain.update(name for name in payload if name not in v.FIELD_CHECKS)
    return None


def _bad_attribute_values(cols: Columns, mapped: dict[str, str]) -> dict[int, str]:
    """Row → first bad value reason, checked column-wise and only where the type can be bad."""
    bad: dict[int, str] = {}
    for column, name in mapped.items():
        arrow_type = cols.type(column)
        if name not in v.FIELD_CHECKS and (
                pa.types.is_integer(arrow_type) or pa.types.is_string(arrow_type)
                or pa.types.is_boolean(arrow_type) or pa.types.is_null(arrow_type)):
            continue
        for i, value in enumerate(cols.ready(column)):
            if i not in bad:
                problem = v.check_attribute_value(name, value)
                if problem is not None:
                    bad[i] = problem
    return bad
