"""Rows a driver returns (tuples of Python values) as Arrow record batches. Pure.

Invariant: an object value (JSON, VARIANT, STRUCT or SUPER parsed by the driver into dicts or
lists) becomes its JSON text, one document per row, never an Arrow struct (whose union of keys
would give each row the others' keys as nulls, and a null unsets an attribute at the service).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa


def rows_to_batch(rows: Sequence[Sequence[Any]], names: Sequence[str]) -> pa.RecordBatch:
    """Driver rows → one Arrow batch, a column per name."""
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays([to_array(values) for values in columns],
                                      names=list(names))


def to_array(values: Sequence[Any]) -> pa.Array:
    """One column of driver values as an Arrow array.

    Objects (a JSON, VARIANT, STRUCT or SUPER column that the driver parsed into dicts or
    lists) become JSON text, one document per row: an Arrow struct would give every row the
    union of all rows' keys, the missing ones as nulls, and a null attribute unsets it at the
    service. Mixed types that Arrow refuses become text too."""
    sample = next((v for v in values if v is not None), None)
    if isinstance(sample, Mapping | list) or hasattr(sample, "asDict"):
        return pa.array([None if v is None else _json_text(v) for v in values], pa.string())
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else _json_text(v) if isinstance(v, Mapping | list)
                         else str(v) for v in values], type=pa.string())


def _json_text(value: Any) -> str:
    return orjson.dumps(value, default=_json_default).decode()


def _json_default(value: Any) -> Any:
    """What orjson does not write itself: decimals (as numbers), a driver's row objects."""
    if isinstance(value, Decimal):
        return float(value)
    if hasattr(value, "asDict"):
        return value.asDict()
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")
