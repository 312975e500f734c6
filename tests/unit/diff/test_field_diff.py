"""The field-level diff (pure): what is sent, what is recorded, and digests that never change."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from engage_sync.diff.field_diff import diff, diff_stored, slot_of, value_digest, whole_encoded
from engage_sync.state.field_codec import decode, encode, merged, user_key


def test_digests_are_stable_across_versions() -> None:
    """Stored records outlive upgrades: a new xxhash (or a change here) that moved a digest
    would make every record wrong. These are the values of the first release."""
    assert value_digest("first_name", "Alice") == 17443028911909956419
    assert slot_of("first_name") == 632072675
    assert user_key("external_id:u1").hex() == "d69fa0075a4f3036469fb40c90b4e1d2"
    assert value_digest("x", None) == 7736715791780240265


def test_nested_values_are_canonical() -> None:
    assert value_digest("g", {"b": 1, "a": 2}) == value_digest("g", {"a": 2, "b": 1})
    assert value_digest("a", 1) != value_digest("b", 1)  # the name seeds the digest


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.text(max_size=8),
                   st.lists(st.integers(0, 3), max_size=3),
                   st.dictionaries(st.sampled_from("xyz"), st.integers(0, 3), max_size=2))
NAMES = st.text("abcdefgh_", min_size=1, max_size=6)
ATTRIBUTES = st.dictionaries(NAMES, VALUES, max_size=8)


@given(st.dictionaries(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), max_size=30))
def test_encode_round_trips(digests: dict[int, int]) -> None:
    blob = encode(digests)
    assert len(blob) == 12 * len(digests)
    assert decode(blob) == digests


def _obj(attributes: dict[str, Any], flag: bool | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"external_id": "u1", **attributes}
    if flag is not None:
        obj["_update_existing_only"] = flag
    return obj


@given(ATTRIBUTES, st.sampled_from([None, True, False]))
def test_a_user_never_sent_gets_everything_then_nothing(attributes: dict[str, Any],
                                                        flag: bool | None) -> None:
    obj = _obj(attributes, flag)
    first = diff(obj, "external_id", None)
    assert first.obj == obj and first.whole
    assert first.sent == len(attributes) and first.saved == 0
    again = diff(obj, "external_id", merged(None, first.delta))
    assert again.obj is None and again.sent == 0 and again.saved == len(attributes)


@given(ATTRIBUTES, ATTRIBUTES)
def test_only_changed_attributes_are_sent(before: dict[str, Any], after: dict[str, Any]) -> None:
    record = diff(_obj(before), "external_id", None).delta
    change = diff(_obj(after, True), "external_id", record)
    changed = {k: v for k, v in after.items() if (v is not None if k not in before else
               value_digest(k, before[k]) != value_digest(k, v))}
    if not changed:
        assert change.obj is None
    else:
        assert change.obj == {"external_id": "u1", "_update_existing_only": True, **changed}
    assert change.sent == len(changed) and change.saved == len(after) - len(changed)
    assert decode(encode(merged(record, change.delta))) == diff(
        _obj({**before, **changed}), "external_id", None).delta


def test_a_newly_mapped_column_bills_its_non_null_values_only() -> None:
    """A column added to the mapping: the record holds none of its values, and a NULL there
    has nothing of ours to remove, so only non-null values are sent (one point each)."""
    record = diff(_obj({"a": 1}), "external_id", None).delta
    assert diff(_obj({"a": 1, "tier": None}), "external_id", record).obj is None
    change = diff(_obj({"a": 1, "tier": "gold"}), "external_id", record)
    assert change.obj == {"external_id": "u1", "tier": "gold"} and change.sent == 1
    # once recorded, a value that becomes NULL is a removal, sent
    record = merged(record, change.delta)
    assert diff(_obj({"a": 1, "tier": None}), "external_id", record).obj == {
        "external_id": "u1", "tier": None}


def test_null_is_sent_once_then_nothing() -> None:
    record = diff(_obj({"a": 1, "b": 2}), "external_id", None).delta
    to_null = diff(_obj({"a": None, "b": 2}), "external_id", record)
    assert to_null.obj == {"external_id": "u1", "a": None}
    record = merged(record, to_null.delta)
    assert diff(_obj({"a": None, "b": 2}), "external_id", record).obj is None


@given(ATTRIBUTES)
def test_refresh_sends_everything_and_records_it(attributes: dict[str, Any]) -> None:
    """A full resync diffs against no record (`Differ` on refresh)."""
    record = diff(_obj(attributes), "external_id", None).delta
    change = diff(_obj(attributes), "external_id", None)
    assert change.obj == _obj(attributes) and change.delta == record


@given(ATTRIBUTES, ATTRIBUTES, st.sampled_from([None, True, False]))
def test_a_stored_record_diffs_as_its_decoded_digests(
    before: dict[str, Any], after: dict[str, Any], flag: bool | None
) -> None:
    """`diff_stored` (against the bytes stored, the fast path of an unchanged row) gives what
    `diff` gives against the decoded record, whatever order the record was encoded in."""
    record = diff(_obj(before), "external_id", None).delta
    reordered = dict(reversed(record.items()))
    for stored in (encode(record), encode(reordered)):
        assert diff_stored(_obj(after, flag), "external_id", stored) == diff(
            _obj(after, flag), "external_id", record)


@given(ATTRIBUTES, st.sampled_from([None, True, False]))
def test_a_whole_object_encodes_as_its_diff_against_nothing(
    attributes: dict[str, Any], flag: bool | None
) -> None:
    """The first run's fast encoding of a whole object is the record `diff` would write; an
    unchanged object compared with it, as stored, is unchanged."""
    obj = _obj(attributes, flag)
    blob = whole_encoded("external_id:u1", orjson.dumps(obj))
    assert decode(blob) == diff(obj, "external_id", None).delta
    unchanged = diff_stored(obj, "external_id", blob)
    assert unchanged.obj is None and unchanged.saved == len(attributes)
