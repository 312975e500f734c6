"""Merging journal entries' item keys (`state.journal.merged_keys`): text joined, never
parsed, so it must still be exactly the JSON of all the keys in order. Pure."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engage_sync.state.journal import json_text, merged_keys


def test_keys_of_merged_entries_are_all_of_them_in_order() -> None:
    texts = [json.dumps(["u1", "u2"]), json.dumps([]), json.dumps(["u3"])]
    assert json.loads(merged_keys(texts) or "") == ["u1", "u2", "u3"]


def test_an_entry_without_keys_leaves_the_merge_without_keys() -> None:
    assert merged_keys([json.dumps(["u1"]), None, json.dumps(["u2"])]) is None


def test_nothing_to_merge_is_an_empty_list() -> None:
    assert merged_keys([]) == "[]"
    assert merged_keys([json.dumps([]), json.dumps([])]) == "[]"


@given(st.lists(st.lists(st.text())))
def test_any_keys_merge_as_if_parsed_and_written_again(groups: list[list[str]]) -> None:
    """Keys holding brackets, commas, quotes, escapes or spaces at their ends included."""
    texts = [json.dumps(keys) for keys in groups]
    merged = merged_keys(texts)
    assert merged == json.dumps([k for keys in groups for k in keys])


def test_arrays_written_with_other_spacing_still_merge_into_the_same_keys() -> None:
    assert json.loads(merged_keys([' [ "a" ] ', '["b","c"]', "\n[]\n"]) or "") == ["a", "b", "c"]


@pytest.mark.parametrize("text", ["null", '{"a": 1}', '"a"'])
def test_keys_that_are_not_an_array_are_refused_not_merged_into_bad_json(text: str) -> None:
    with pytest.raises(ValueError, match="not a JSON array"):
        merged_keys(['["a"]', text])


@given(st.lists(st.lists(st.one_of(st.text(), st.none()))))
def test_keys_journaled_by_orjson_or_json_read_and_merge_as_written(
        groups: list[list[str | None]]) -> None:
    """`json_text` writes the arrays (orjson; `json` for what orjson refuses, such as a lone
    surrogate); whatever wrote them, they read back and merge to the same keys."""
    texts = [json_text(keys) for keys in groups]
    assert [json.loads(t) for t in texts] == groups
    assert json.loads(merged_keys(texts) or "") == [k for keys in groups for k in keys]


def test_a_lone_surrogate_orjson_refuses_is_journaled_by_json() -> None:
    assert json.loads(json_text(["a\ud800"])) == ["a\ud800"]
