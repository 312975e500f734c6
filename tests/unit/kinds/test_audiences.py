"""`kind: audience`: the file's rules (each refusal names the file and the key) and the objects a
changed membership becomes (one key each: a point entering, a point leaving). Pure."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from engage_sync.config.files import parse_integration
from engage_sync.config.integration import Integration
from engage_sync.errors import ConfigError
from engage_sync.kinds.audience import membership_transform

BASE: dict[str, Any] = {
    "kind": "audience", "source": {"table": "dbt_prod.churn_audiences"},
    "mapping": {"identifier": {"external_id": "USER_ID"}},
    "audience": {"name_column": "AUDIENCE", "attribute": "audiences", "as": "array"},
}


def _parse(**changes: Any) -> Integration:
    return parse_integration({**BASE, **changes}, file="churn.yaml")


def test_an_audience_is_always_a_snapshot_that_sends_leavers() -> None:
    i = _parse()
    assert (i.changes, i.on_leave, i.audience.as_) == (  # type: ignore[union-attr]
        "snapshot", "clear", "array")
    one = _parse(audience={"name": "churn_risk", "as": "boolean"})
    assert one.audience.attribute_of("churn_risk") == "audience_churn_risk"  # type: ignore[union-attr]


@pytest.mark.parametrize(("changes", "key"), [
    ({"audience": None}, "'audience' section"),
    ({"audience": {"name_column": "A", "attribute": "a", "as": "list"}}, "audience.as"),
    ({"audience": {"name_column": "A", "attribute": "a"}}, "audience.as"),
    ({"audience": {"attribute": "a", "as": "array"}}, "'audience.name'"),
    ({"audience": {"name_column": "A", "as": "array"}}, "'audience.attribute'"),
    ({"audience": {"name": "x", "name_column": "A", "attribute": "a", "as": "array"}},
     "'audience.name_column' or 'audience.name'"),
    ({"audience": {"name": "x", "attribute": "a", "as": "boolean"}}, "'audience.attribute'"),
    ({"audience": {"name": "x", "attribute": "a", "as": "array", "prefix": "p_"}},
     "'audience.prefix'"),
    ({"audience": {"name": "x", "as": "boolean", "colour": 1}}, "audience.colour"),
    ({"on_leave": "keep"}, "'on_leave'"),
    ({"changes": "cursor"}, "'changes'"),
    ({"mapping": {"identifier": {"external_id": "U"}, "attributes": {"P": "p"}}},
     "'mapping.identifier'"),
    ({"kind": "attributes", "mapping": {"identifier": {"external_id": "U"},
                                        "attributes": {"P": "p"}}}, "kind 'audience'"),
])
def test_a_bad_audience_setting_names_the_file_and_the_key(changes: dict[str, Any],
                                                           key: str) -> None:
    raw = {k: v for k, v in {**BASE, **changes}.items() if v is not None}
    with pytest.raises(ConfigError) as refused:
        parse_integration(raw, file="churn.yaml")
    assert "churn.yaml" in str(refused.value) and key in str(refused.value)


def _pairs(**columns: list[Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def test_array_memberships_are_add_and_remove_one_point_each() -> None:
    i = _parse()
    transform = membership_transform("engage_audience", "engage_change", "left")
    result = transform(i, _pairs(USER_ID=["u1", "u1", "u2", "u3"],
                                 engage_audience=["vip", "churn", None, "x" * 256],
                                 engage_change=["new", "left", "new", "new"]), 10)
    assert [orjson.loads(x.blob) for x in result.items] == [
        {"external_id": "u1", "audiences": {"add": ["vip"]}},
        {"external_id": "u1", "audiences": {"remove": ["churn"]}}]
    assert [x.points for x in result.items] == [1, 1]
    assert [r.seq for r in result.rejects] == [12, 13]  # a NULL name, a name too long
    assert all("AUDIENCE" in r.reason for r in result.rejects)


def test_boolean_memberships_are_true_then_false_under_the_prefix() -> None:
    i = _parse(audience={"name": "churn_risk", "as": "boolean", "prefix": "seg_"})
    transform = membership_transform("engage_audience", "engage_change", "left")
    result = transform(i, _pairs(USER_ID=["u1", "u2", None],
                                 engage_audience=["churn_risk"] * 3,
                                 engage_change=["new", "left", "new"]), 0)
    assert [orjson.loads(x.blob) for x in result.items] == [
        {"external_id": "u1", "seg_churn_risk": True},
        {"external_id": "u2", "seg_churn_risk": False}]
    (reject,) = result.rejects
    assert "USER_ID" in reject.reason
