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

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa

from engage_sync import validate as v
from engage_sync.config import EventMapping, Integration, PurchaseMapping
from engage_sync.errors import SourceError
from engage_sync.model import KEY_PART_MAX, Item, Reject, TransformResult, digest_part, key_part
from engage_sync.subscriptions import track_groups

# A row's user reference: (field of the object, its JSON value, canonical user string).
Ref = tuple[str, Any, str]

EVENT_FIELDS = frozenset({"name", "time", "app_id", "properties"})
PURCHASE_FIELDS = frozenset(
    {"product_id", "currency", "price", "quantity", "time", "app_id", "properties"}
)
_ATTRIBUTE_RESERVED = frozenset(
    {"external_id", "user_alias", "platform_id", "braze_id", "_update_existing_only"}
)
_PHONE_EVENTS = (
    "phone cannot identify events or purchases (the interface gives them no phone reference); "
    "use external_id, user_alias, platform_id or email"
)


def iso_utc(value: datetime) -> str:
    """A datetime as ISO 8601 in UTC with 'Z'; milliseconds when whole, none when zero."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    text = value.isoformat()
    micro = value.microsecond
    if micro and micro % 1000 == 0:
        return text[:-3] + "Z"
    return text + "Z"


def _json_ready(value: Any) -> Any:
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list):
        return [_json_ready(item) for item in value]
    if isinstance(value, dict):
        return {k: _json_ready(item) for k, item in value.items()}
    return value


_EPOCH = datetime(1970, 1, 1)


def _iso_column(column: pa.Array) -> list[str | None]:
    """A timestamp column as `iso_utc` strings, from epoch integers (no datetime per row)."""
    unit = column.type.unit
    to_micros = {"s": 1_000_000, "ms": 1000, "us": 1}.get(unit)
    prefixes: dict[int, str] = {}  # whole seconds → 'YYYY-MM-DDTHH:MM:SS'; rows share seconds
    out: list[str | None] = []
    for ticks in column.cast(pa.int64()).to_pylist():
        if ticks is None:
            out.append(None)
            continue
        micros = ticks // 1000 if to_micros is None else ticks * to_micros
        seconds, fraction = divmod(micros, 1_000_000)
        prefix = prefixes.get(seconds)
        if prefix is None:
            prefix = prefixes[seconds] = (_EPOCH + timedelta(seconds=seconds)).isoformat()
        if fraction == 0:
            out.append(prefix + "Z")
        elif fraction % 1000 == 0:
            out.append(f"{prefix}.{fraction // 1000:03d}Z")
        else:
            out.append(f"{prefix}.{fraction:06d}Z")
    return out


def _plain(arrow_type: pa.DataType) -> bool:
    """Types whose Python values are JSON-ready as they come."""
    t = pa.types
    return bool(
        t.is_integer(arrow_type) or t.is_boolean(arrow_type) or t.is_string(arrow_type)
        or t.is_large_string(arrow_type) or t.is_null(arrow_type) or t.is_floating(arrow_type)
    )


class _Columns:
    """The batch's columns by config name, each read once: raw values and JSON-ready values."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch
        self._raw: dict[str, list[Any]] = {}
        self._ready: dict[str, list[Any]] = {}

    def type(self, name: str) -> pa.DataType:
        return self._batch.schema.field(self._index(name)).type

    def _index(self, name: str) -> int:
        index = self._batch.schema.get_field_index(name)
        if index < 0:
            raise SourceError(f"column {name!r} is named in the integration but not in the batch")
        return index

    def raw(self, name: str) -> list[Any]:
        if name not in self._raw:
            self._raw[name] = self._batch.column(self._index(name)).to_pylist()
        return self._raw[name]

    def ready(self, name: str) -> list[Any]:
        if name not in self._ready:
            arrow_type = self.type(name)
            if pa.types.is_timestamp(arrow_type):
                self._ready[name] = _iso_column(self._batch.column(self._index(name)))
                return self._ready[name]
            values = self.raw(name)
            if pa.types.is_map(arrow_type):
                values = [None if x is None else _json_ready(dict(x)) for x in values]
            elif not _plain(arrow_type):
                values = [_json_ready(x) for x in values]
            self._ready[name] = values
        return self._ready[name]


def _keys(cols: _Columns, names: tuple[str, ...], hidden: frozenset[str], n: int) -> list[str]:
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


def _id_text(value: Any) -> Any:
    """Integer ids (a common column type) are sent as their decimal string."""
    if type(value) is int:
        return str(value)
    return value


def _references(integration: Integration, cols: _Columns) -> list[Ref | str]:
    """Per row: the user reference, or the reason it is missing or invalid."""
    kind = integration.identifier_kind
    columns = integration.identifier_columns
    out: list[Ref | str] = []
    if kind == "user_alias":
        name_col, label_col = columns
        for name, label in zip(cols.raw(name_col), cols.raw(label_col), strict=True):
            name, label = _id_text(name), _id_text(label)
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
        value = _id_text(value)
        if value is None:
            out.append(f"{column} is missing (NULL)")
            continue
        problem = check(value, column)
        user = f"{kind}:{value.lower() if lower else value}" if problem is None else ""
        out.append(problem or (kind, value, user))
    return out


def _parse_payload(raw: Any, column: str) -> dict[str, Any] | str:
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


def _flag(integration: Integration) -> bool | None:
    """`_update_existing_only`: the integration's choice; false for aliases so they are created."""
    if integration.update_existing_only is not None:
        return integration.update_existing_only
    return False if integration.identifier_kind == "user_alias" else None


class _Sink:
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
            # Copied to an exact-size object: orjson's result keeps its oversized first
            # allocation, and 100,000 of those alive at once fragment the heap (4x slower).
            blob = bytes(memoryview(orjson.dumps(obj)))
        except (orjson.JSONEncodeError, TypeError):
            self.reject(i, "the object cannot be written as JSON (a value of unsupported type)")
            return
        if len(blob) > self.limit:
            self.reject(i, v.check_blob_size(len(blob), self.max_body_bytes) or "too large")
            return
        self.items.append(Item(self.first_seq + i, self.keys[i], user, self.array, blob))

    def result(self) -> TransformResult:
        return TransformResult(self.items, self.rejects)


def transform_batch(
    integration: Integration, batch: pa.RecordBatch, first_seq: int
) -> TransformResult:
    """Turn one batch into items and rejects; row i gets seq first_seq + i.

    Raises SourceError when a configured column is not in the batch.
    """
    cols = _Columns(batch)
    keys = _keys(cols, integration.key_columns, integration.hidden_key_columns, batch.num_rows)
    sink = _Sink(first_seq, keys, integration.kind, integration.service.limits.max_body_bytes)
    refs = _references(integration, cols)
    if integration.kind == "attributes":
        _attributes(integration, cols, refs, sink)
    elif integration.identifier_kind == "phone":
        for i, ref in enumerate(refs):
            sink.reject(i, ref if isinstance(ref, str) else _PHONE_EVENTS)
    else:
        _events(integration, cols, refs, sink)
    return sink.result()


# --- attributes ------------------------------------------------------------------------------


def _attributes(
    integration: Integration, cols: _Columns, refs: list[Ref | str], sink: _Sink
) -> None:
    flag = _flag(integration)
    reserved = _ATTRIBUTE_RESERVED | {integration.identifier_kind}
    fmt = integration.payload_format
    if fmt is not None:
        column = fmt.payload_column
        payloads = cols.ready(column)
        loads = orjson.loads
        for i, ref in enumerate(refs):
            if isinstance(ref, str):
                sink.reject(i, ref)
                continue
            raw = payloads[i]
            try:  # the common case inline; _parse_payload says what is wrong otherwise
                payload = loads(raw)
            except (orjson.JSONDecodeError, TypeError):
                payload = None
            if type(payload) is not dict:
                payload = _parse_payload(raw, column)
                if isinstance(payload, str):
                    sink.reject(i, payload)
                    continue
            problem = _payload_attributes_problem(payload, reserved)
            if problem is not None:
                sink.reject(i, problem)
                continue
            field, value, user = ref
            obj = {field: value, **payload}
            if flag is not None:
                obj["_update_existing_only"] = flag
            sink.item(i, user, obj)
        return
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


def _payload_attributes_problem(payload: dict[str, Any], reserved: frozenset[str]) -> str | None:
    """JSON values can be bad only as objects (array operations) or as standard fields of a
    fixed shape (`validate.FIELD_CHECKS`); the rest is checked by name."""
    if len(payload) > v.MAX_ATTRIBUTES_PER_ROW:
        return v.check_attribute_count(len(payload))
    for name, value in payload.items():
        if not name or name[0] == "$" or name in reserved:
            return v.check_attribute_name(name, reserved)
        if (type(value) is dict or name in v.FIELD_CHECKS) and (
                problem := v.check_attribute_value(name, value)):
            return problem
    return None


def _bad_attribute_values(cols: _Columns, mapped: dict[str, str]) -> dict[int, str]:
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


# --- events and purchases --------------------------------------------------------------------

Fields = dict[str, Any]


def _is_time_type(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type))


def _events(integration: Integration, cols: _Columns, refs: list[Ref | str], sink: _Sink) -> None:
    """One event (or purchase) object per row; a missing time defaults to the cursor column."""
    flag = _flag(integration)
    purchases = integration.kind == "purchases"
    cursor = integration.cursor_column
    default_times = cols.ready(cursor)
    default_trusted = _is_time_type(cols.type(cursor))
    fmt = integration.payload_format
    rows: list[Fields | str]
    if fmt is not None:
        allowed = PURCHASE_FIELDS if purchases else EVENT_FIELDS
        labels = {f: f"{fmt.payload_column}.{f}" for f in allowed}
        rows = [_payload_fields(raw, fmt.payload_column, allowed, purchases)
                for raw in cols.ready(fmt.payload_column)]
        time_trusted = False
    else:
        assert integration.mapping is not None
        spec = integration.mapping.purchase if purchases else integration.mapping.event
        assert spec is not None
        rows, labels, time_trusted = _mapped_fields(spec, cols, len(refs))
    for i, ref in enumerate(refs):
        fields = rows[i]
        if isinstance(ref, str) or isinstance(fields, str):
            sink.reject(i, ref if isinstance(ref, str) else str(fields))
            continue
        time, trusted, time_label = fields.get("time"), time_trusted, labels["time"]
        if time is None:
            time, trusted = default_times[i], default_trusted
            time_label = f"{cursor} (the default of {labels['time']})"
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


def _payload_fields(
    raw: Any, column: str, allowed: frozenset[str], purchases: bool
) -> Fields | str:
    fields = _parse_payload(raw, column)
    if isinstance(fields, str):
        return fields
    for name in fields:
        if name not in allowed:
            what = "a purchase" if purchases else "an event"
            return f"{column} key {v.name_label(name)} is not a field of {what}"
    return fields


def _mapped_fields(
    spec: EventMapping | PurchaseMapping, cols: _Columns, n: int
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
