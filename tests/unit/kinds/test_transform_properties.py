"""Properties of transform_batch on random rows, valid and invalid.

Every string value a row holds carries the marker `§`, which no name and no fixed text of a
reason contains, so a reason that leaks a value is caught.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson
import pyarrow as pa
from hypothesis import event, given, settings
from hypothesis import strategies as st

from engage_sync.config.files import parse_integration
from engage_sync.config.integration import Integration
from engage_sync.items import TransformResult
from engage_sync.kinds.track_transform import transform_batch

MARK = "§"
T0 = datetime(2024, 1, 2, 3, 4, 5)

names = st.text(alphabet="ab_$ XY9", max_size=6) | st.sampled_from(
    ["name", "time", "app_id", "properties", "product_id", "currency", "price", "quantity",
     "external_id", "email"]
)
marked = st.text(max_size=12).map(lambda s: MARK + s)
marked_time = st.sampled_from(["2024-01-02T03:04:05Z", "2024-13-01", "12:00"]).map(
    lambda s: s + MARK
)
scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | marked | marked_time
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
identifiers = st.none() | st.just("") | marked | marked.map(lambda s: s + "@x.io") | st.just(
    "+15551234567"
)


good_names = st.text(alphabet="abXY_9", min_size=1, max_size=6)
good_ids = {
    "external_id": marked,
    "platform_id": marked,
    "email": st.text(alphabet="abc.", min_size=1, max_size=5).map(lambda s: MARK + s + "@x.io"),
    "phone": st.integers(10, 10**14).map(lambda x: f"+{x}"),
}


@st.composite
def payload_cells(draw: st.DrawFn, kind: str) -> str | None:
    """A PAYLOAD cell: often a plausible object for the kind, sometimes anything or no JSON."""
    choice = draw(st.integers(0, 7))
    if choice == 0:
        return None
    if choice == 1:
        return draw(marked)  # not valid JSON
    if choice == 2:
        return orjson.dumps(draw(st.lists(json_values, max_size=2))).decode()
    if choice == 3:
        return orjson.dumps(draw(st.dictionaries(names, json_values, max_size=6))).decode()
    if kind == "attributes":
        fields = draw(st.dictionaries(good_names, json_values, max_size=6))
    else:
        fields = {"properties": draw(st.dictionaries(good_names, scalars, max_size=3))}
        if draw(st.booleans()):
            fields["time"] = draw(st.sampled_from(["2024-01-02T03:04:05Z", "2024-01-02"]))
        if kind == "events":
            fields["name"] = draw(marked)
        else:
            fields.update(
                product_id=draw(marked),
                currency=draw(st.sampled_from(["USD", "EU" + MARK])),
                price=draw(st.floats(allow_nan=False, allow_infinity=False)),
                quantity=draw(st.integers(0, 101)),
            )
    return orjson.dumps(fields).decode()


def times(n: int) -> pa.Array:
    return pa.array([T0 + timedelta(seconds=i) for i in range(n)], pa.timestamp("us"))


def check_accounting(result: TransformResult, rows: int, first_seq: int) -> None:
    seqs = [i.seq for i in result.items] + [r.seq for r in result.rejects]
    assert sorted(seqs) == list(range(first_seq, first_seq + rows))
    assert len(seqs) == rows
    assert [i.seq for i in result.items] == sorted(i.seq for i in result.items)
    for reject in result.rejects:
        assert MARK not in reject.reason, reject.reason
        assert reject.reason
    for item in result.items:
        assert isinstance(orjson.loads(item.blob), dict)
    event(f"items: {bool(result.items)}, rejects: {bool(result.rejects)}")


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["attributes", "events", "purchases"]),
    identifier=st.sampled_from(["external_id", "email", "phone", "platform_id", "user_alias"]),
    update_existing_only=st.sampled_from([None, True, False]),
    n=st.integers(0, 12),
    data=st.data(),
    first_seq=st.integers(0, 10**9),
)
def test_payload_rows_are_accounted_and_reasons_hide_values(
    kind: str, identifier: str, update_existing_only: bool | None, n: int, data: st.DataObject,
    first_seq: int,
) -> None:
    some_id = st.one_of(good_ids.get(identifier, marked), identifiers)
    ids = [(data.draw(some_id), data.draw(st.one_of(marked, identifiers))) for _ in range(n)]
    payload = [data.draw(payload_cells(kind)) for _ in range(n)]
    column = {"external_id": "EXTERNAL_ID", "email": "EMAIL", "phone": "PHONE",
              "platform_id": "BRAZE_ID"}
    id_columns: dict[str, pa.Array] = (
        {"ALIAS_NAME": pa.array([a for a, _ in ids], pa.string()),
         "ALIAS_LABEL": pa.array([b for _, b in ids], pa.string())}
        if identifier == "user_alias"
        else {column[identifier]: pa.array([a for a, _ in ids], pa.string())}
    )
    batch = pa.record_batch(
        {"UPDATED_AT": times(n), **id_columns, "PAYLOAD": pa.array(payload, pa.string())}
    )
    integration = parse_integration(
        {"kind": kind, "source": {"table": "t"}, "payload": {"identifier": identifier},
         "update_existing_only": update_existing_only},
        file="p.yaml",
    )
    check_accounting(transform_batch(integration, batch, first_seq), n, first_seq)


def mapped_integration(kind: str) -> Integration:
    mapping: dict[str, Any] = {"identifier": {"external_id": "ID"}}
    if kind == "attributes":
        mapping["attributes"] = {"S": "s", "F": "f", "I": "i"}
    elif kind == "events":
        mapping["event"] = {"name_column": "S", "time": "TS", "properties": {"F": "f", "I": "i"}}
    else:
        mapping["purchase"] = {"product_id": "S", "currency": "CUR", "price": "F",
                               "quantity": "I", "time": "TS", "properties": {"S": "s"}}
    return parse_integration({"kind": kind, "source": {"table": "t"}, "mapping": mapping},
                             file="m.yaml")


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["attributes", "events", "purchases"]),
    rows=st.lists(
        st.tuples(
            st.one_of(marked, identifiers),
            st.none() | marked | st.text(max_size=300).map(lambda s: s + MARK),
            st.none() | st.floats(),
            st.none() | st.integers(-(2**63), 2**63 - 1),
            st.none() | marked_time,
            st.none() | st.sampled_from(["USD", "usd", "US" + MARK]),
        ),
        max_size=12,
    ),
    first_seq=st.integers(0, 10**9),
)
def test_mapped_rows_are_accounted_and_reasons_hide_values(
    kind: str, rows: list[tuple[Any, ...]], first_seq: int
) -> None:
    n = len(rows)
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    batch = pa.record_batch({
        "UPDATED_AT": times(n),
        "ID": pa.array(columns[0], pa.string()),
        "S": pa.array(columns[1], pa.string()),
        "F": pa.array(columns[2], pa.float64()),
        "I": pa.array(columns[3], pa.int64()),
        "TS": pa.array(columns[4], pa.string()),
        "CUR": pa.array(columns[5], pa.string()),
    })
    check_accounting(transform_batch(mapped_integration(kind), batch, first_seq), n, first_seq)
