"""`on_leave` with a cursor: the `leave_check` rules of an integration file (each refusal names
the file and the key), and the check's pure parts: who left, compared as Arrow in DuckDB, and
what engage-sync set on each, from its field record."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from engage_sync.config.files import parse_integration
from engage_sync.diff.field_diff import slot_of, value_digest
from engage_sync.errors import ConfigError
from engage_sync.snapshot import leavers as lv
from engage_sync.snapshot.layout import CHANGE, LEFT, SEQ, layout_of
from engage_sync.state.field_codec import encode

BASE: dict[str, Any] = {
    "kind": "attributes", "source": {"table": "users"},
    "mapping": {"identifier": {"external_id": "ID"},
                "attributes": {"PLAN": "plan", "CITY": "city"}},
}


def test_a_cursor_integration_takes_on_leave_with_a_check_period() -> None:
    i = parse_integration({**BASE, "on_leave": "clear", "leave_check": {"every": "12h"},
                           "max_leaves": 40}, file="people.yaml")
    assert (i.changes, i.on_leave, i.max_leaves) == ("cursor", "clear", 40)
    assert i.leave_check is not None and i.leave_check.every == timedelta(hours=12)
    assert parse_integration({**BASE, "on_leave": "clear", "leave_check": {}},
                             file="p.yaml").leave_check.every == timedelta(days=1)  # type: ignore[union-attr]


@pytest.mark.parametrize(("extra", "key"), [
    ({"on_leave": "clear"}, "'leave_check'"),
    ({"leave_check": {"every": "1d"}}, "'leave_check'"),
    ({"max_leaves": 10}, "'max_leaves'"),
    ({"on_leave": "clear", "leave_check": {"every": "soon"}}, "every"),
    ({"on_leave": "clear", "leave_check": {"every": "1d"}, "diff": "off"}, "'diff: fields'"),
    ({"on_leave": "clear", "leave_check": {"every": "1d"}, "partitions": 2}, "'partitions'"),
    ({"changes": "snapshot", "leave_check": {"every": "1d"}}, "'leave_check'"),
])
def test_a_bad_leave_setting_names_the_file_and_the_key(extra: dict[str, Any],
                                                        key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_integration({**BASE, **extra}, file="people.yaml")
    assert "people.yaml" in str(refused.value) and key in str(refused.value)


def test_delete_by_email_is_refused_with_a_cursor_too() -> None:
    email = {**BASE, "mapping": {**BASE["mapping"], "identifier": {"email": "ID"}}}
    with pytest.raises(ConfigError, match="'on_leave: delete'"):
        parse_integration({**email, "on_leave": "delete", "leave_check": {}}, file="p.yaml")


def _ids(*values: Any) -> pa.Table:
    return pa.table({"ID": pa.array(values)})


def test_gone_is_who_the_last_check_found_and_the_source_no_longer_holds() -> None:
    before = _ids("c", "a", "b", "d")
    assert lv.gone(before, _ids("b", "x"), ["ID"]).column("ID").to_pylist() == ["a", "c", "d"]
    assert lv.gone(None, _ids("a"), ["ID"]).num_rows == 0  # a first check: nobody left
    # the same identifier read as a number then as text is the same user
    assert lv.gone(pa.table({"ID": [1, 2]}), _ids("1"), ["ID"]).column("ID").to_pylist() == [2]


def test_only_what_our_record_holds_a_value_of_is_cleared() -> None:
    names = ["plan", "city", "tier"]
    record = encode({slot_of("plan"): value_digest("plan", "gold"),
                     slot_of("city"): value_digest("city", None)})  # we removed it already
    assert lv.set_by_us(record, names) == [True, False, False]
    assert lv.set_by_us(None, names) == [False, False, False]


def test_the_leavers_become_pending_rows_of_the_snapshot_layout() -> None:
    layout = layout_of(parse_integration({**BASE, "on_leave": "clear", "leave_check": {}},
                                         file="p.yaml"))
    rows = lv.pending_rows(_ids("a", "b", "c"), layout,
                           [[True, False], [False, False], [True, True]], held=40)
    assert rows.column(SEQ).to_pylist() == [1, 2]  # "b" has nothing of ours: no row
    assert rows.column("ID").to_pylist() == ["a", "c"]
    assert set(rows.column(CHANGE).to_pylist()) == {LEFT}
    plan, city = layout.attributes
    assert rows.column(plan.send).to_pylist() == [True, True]
    assert rows.column(city.send).to_pylist() == [False, True]
    assert rows.column(plan.column).null_count == 2 and lv.held_of(rows) == 40
