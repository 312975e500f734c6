"""Rows → event and purchase objects for /users/track. Pure.

A missing time defaults to the cursor column; a null property (SQL NULL or JSON null) means the
property is absent and is left out; every rule broken is a reject naming the field.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from engage_sync import validate as v
from engage_sync.config.integration import Integration
from engage_sync.config.track_formats import EventMapping, PurchaseMapping
from engage_sync.kinds.arrow_values import Columns
from engage_sync.kinds.track_rows import Ref, Sink, parse_payload, update_flag

EVENT_FIELDS = frozenset({"name", "time", "app_id", "properties"})
PURCHASE_FIELDS = frozenset(
    {"product_id", "currency", "price", "quantity", "time", "app_id", "properties"}
)


Fields = dict[str, Any]


def _is_time_type(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type))


def events(integration: Integration, cols: Columns, refs: list[Ref | str], sink: Sink) -> None:
    """One event (or purchase) object per row; a missing time defaults to the cursor column."""
    flag = update_flag(integration)
    purchases = integration.kind == "purchases"
    cursor = integration.cursor_column
    default_times = cols.ready(cursor)
    default_trusted = _is_time_type(cols.type(cursor))
    fmt = integration.payload_format
    rows: list[Fields | str]
    if fmt is not None:
        allowed = PURCHASE_FIELDS if purchases else EVENT_FIELDS
        labels = {f: f"{fmt.payload_column}.{f}" for f in allowed}
        rows = _payload_rows(cols.ready(fmt.payload_column), fmt.payload_column, allowed,
                             purchases)
        time_trusted = False
    else:
        assert integration.mapping is not None
        spec = integration.mapping.purchase if purchases else integration.mapping.event
        assert spec is not None
        rows, labels, time_trusted = _mapped_fields(spec, cols, len(refs))
    default_label = f"{cursor} (the default of {labels['time']})"  # once, not per row
    for i, ref in enumerate(refs):
        fields = rows[i]
        if isinstance(ref, str) or isinstance(fields, str):
            sink.reject(i, ref if isinstance(ref, str) else str(fields))
            continue
        time, trusted, time_label = fields.get("time"), time_trusted, labels["time"]
        if time is None:
            time, trusted, time_label = default_times[i], default_trusted, default_label
            if time is None:
                sink.reject(i, f"{labels['time']} is missing and {cursor} is NULL")
                continue
        problem = None if trusted else v.check_time(time, time_label)
        field, value, user = ref
        obj: Fields = {field: value}
        problem = problem or (_purchase if purchases else _event)(obj, fields, labels)
        if problem is not None:
            sink.reject(i, problem)
            continue
        obj["time"] = time
        problem = _properties(obj, fields.get("properties"), labels["properties"])
        if problem is not None:
            sink.reject(i, problem)
            continue
        if flag is not None:
            obj["_update_existing_only"] = flag
        sink.item(i, user, obj)


def _payload_rows(
    raws: list[Any], column: str, allowed: frozenset[str], purchases: bool
) -> list[Fields | str]:
    """Each row's payload parsed, or what is wrong with it (not JSON, not an object, a key that
    is not a field of an event or a purchase)."""
    out: list[Fields | str] = []
    for raw in raws:
        fields = parse_payload(raw, column)
        if isinstance(fields, str):
            out.append(fields)
            continue
        if fields.keys() <= allowed:
            out.append(fields)
            continue
        name = next(name for name in fields if name not in allowed)
        what = "a purchase" if purchases else "an event"
        out.append(f"{column} key {v.name_label(name)} is not a field of {what}")
    return out


def _mapped_fields(
    spec: EventMapping | PurchaseMapping, cols: Columns, n: int
) -> tuple[list[Fields | str], dict[str, str], bool]:
    """Per row the fields read from the mapped columns; labels naming those columns."""
    sources: dict[str, str] = {}
    fixed: Fields = {}
    if isinstance(spec, EventMapping):
        if spec.name_column is not None:
            sources["name"] = spec.name_column
        else:
            fixed["name"] = spec.name
    else:
        sources.update(product_id=spec.product_id, currency=spec.currency, price=spec.price)
        if spec.quantity is not None:
            sources["quantity"] = spec.quantity
    for field in ("time", "app_id"):
        column = getattr(spec, field)
        if column is not None:
            sources[field] = column
    labels = {f: f"{f} (column {c})" for f, c in sources.items()}
    labels.update({f: f"{f} (fixed in the integration)" for f in fixed})
    labels.setdefault("time", "time")
    labels["properties"] = "properties"
    time_trusted = "time" in sources and _is_time_type(cols.type(sources["time"]))
    names = list(sources)
    columns = [cols.ready(c) for c in sources.values()]
    prop_names = list(spec.properties.values())
    prop_columns = [cols.ready(c) for c in spec.properties]
    rows: list[Fields | str] = []
    for i in range(n):
        fields = {**fixed, **{name: col[i] for name, col in zip(names, columns, strict=True)}}
        props = {p: col[i] for p, col in zip(prop_names, prop_columns, strict=True)
                 if col[i] is not None}
        if props:
            fields["properties"] = props
        rows.append(fields)
    return rows, labels, time_trusted


def _event(obj: Fields, fields: Fields, labels: dict[str, str]) -> str | None:
    """Adds app_id and name to obj, or says which rule they break."""
    problem = _app_id(obj, fields, labels)
    name = fields.get("name")
    problem = problem or (
        f"{labels['name']} is missing" if name is None else v.check_event_name(name, labels["name"])
    )
    obj["name"] = name
    return problem


def _purchase(obj: Fields, fields: Fields, labels: dict[str, str]) -> str | None:
    """Adds app_id, product_id, currency, price and quantity (default 1) to obj."""
    problem = _app_id(obj, fields, labels)
    if problem is not None:
        return problem
    for field, check in (("product_id", v.check_product_id), ("currency", v.check_currency),
                         ("price", v.check_price)):
        value = fields.get(field)
        if value is None:
            return f"{labels[field]} is missing"
        problem = check(value, labels[field])
        if problem is not None:
            return problem
        obj[field] = value
    quantity = fields.get("quantity")
    if quantity is None:
        obj["quantity"] = 1
        return None
    problem = v.check_quantity(quantity, labels["quantity"])
    obj["quantity"] = int(quantity) if problem is None else None
    return problem


def _app_id(obj: Fields, fields: Fields, labels: dict[str, str]) -> str | None:
    app_id = fields.get("app_id")
    if app_id is None:
        return None
    obj["app_id"] = app_id
    return v.check_app_id(app_id, labels["app_id"])


def _properties(obj: Fields, properties: Any, label: str) -> str | None:
    """Adds the properties (nulls left out) to obj unless empty, or says which rule they break."""
    if properties is None:
        return None
    if isinstance(properties, dict) and None in properties.values():
        properties = {k: p for k, p in properties.items() if p is not None}
    problem = v.check_properties(properties, label)
    if problem is None and properties:
        obj["properties"] = properties
    return problem
