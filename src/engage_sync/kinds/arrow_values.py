"""Arrow columns as JSON-ready Python values, each column converted once. Pure.

Timestamps → ISO 8601 in UTC with `Z` (naive means UTC), dates → ISO dates, decimals → floats,
maps → objects. A column named in the integration but missing from the batch raises
`SourceError`.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from engage_sync.errors import SourceError


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


class Columns:
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
