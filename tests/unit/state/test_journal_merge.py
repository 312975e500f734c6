"""Merging journal entries' item keys (`state.journal.merged_keys`): text joined, never
parsed, so it must still be exactly the JSON of all the keys in order; which entries a
compaction merges, and the stretches it deletes. Pure."""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engage_sync.cursor.progress import encode_cursor
from engage_sync.state.journal import (
    MERGED_ITEMS,
    _mergeable,
    _parts,
    _stretches,
    json_text,
    merged_keys,
)


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


# --- which entries compaction merges (`journal._mergeable`), and how it deletes the rest ----

class _Entry(NamedTuple):
    req_no: int
    start_cursor: str | None
    end_cursor: str | None
    state: str = "acked"
    failed: int = 0
    in_doubt: int = 0
    item_count: int = 75


def _at(n: int) -> str | None:
    return encode_cursor([n, f"k{n}"])


def _layout(*ranges: tuple[int, int]) -> list[_Entry]:
    """Journal order: request i + 1 covers (start, end] of the i-th range (0: the beginning)."""
    return [_Entry(i + 1, _at(a) if a else None, _at(b)) for i, (a, b) in enumerate(ranges)]


def test_a_journal_that_chains_in_its_own_order_is_one_group() -> None:
    rows = _layout((0, 10), (10, 20), (20, 30))
    assert [[r.req_no for r in g] for g in _mergeable(rows)] == [[1, 2, 3]]


def test_a_resumed_runs_journal_out_of_source_order_is_sorted_before_grouping() -> None:
    # a resume journaled (10, 20] after (20, 30]: in journal order nothing chains, in source
    # order all three do (a version that trusted journal order made three groups)
    rows = _layout((0, 10), (20, 30), (10, 20))
    assert [[r.req_no for r in g] for g in _mergeable(rows)] == [[1, 3, 2]]


def test_an_entry_in_doubt_or_with_failures_stands_alone() -> None:
    rows = [*_layout((0, 10), (10, 20), (20, 30), (30, 40))]
    rows[1] = rows[1]._replace(state="in_doubt", in_doubt=3)
    rows[3] = rows[3]._replace(failed=1)
    assert [[r.req_no for r in g] for g in _mergeable(rows)] == [[1], [2], [3], [4]]


def test_an_entry_merged_before_is_not_merged_again() -> None:
    # compacted while the run sent: (0, 20] is one merged entry; (20, 40] merges apart from it
    rows = _layout((0, 20), (20, 30), (30, 40))
    rows[0] = rows[0]._replace(item_count=MERGED_ITEMS + 1)
    assert [[r.req_no for r in g] for g in _mergeable(rows)] == [[1], [2, 3]]


@pytest.mark.parametrize(("numbers", "stretches"), [
    ([], []), ([5], [(5, 5)]), ([2, 3, 4, 13334], [(2, 4), (13334, 13334)]),
    ([9, 7, 8, 11], [(7, 9), (11, 11)])])
def test_removed_entries_are_deleted_by_stretches_of_consecutive_numbers(
        numbers: list[int], stretches: list[tuple[int, int]]) -> None:
    assert _stretches(numbers) == stretches


@given(st.sets(st.integers(1, 200)))
def test_stretches_cover_exactly_the_numbers(numbers: set[int]) -> None:
    covered = {n for first, last in _stretches(sorted(numbers)) for n in range(first, last + 1)}
    assert covered == numbers


# --- how a mergeable group is cut by the size of its keys (`journal._parts`) --------------

def _cut(sizes: list[int | None], cap: int) -> list[list[int]]:
    entries = [(n, None if size is None else "k" * size) for n, size in enumerate(sizes)]
    return [[n for n, _ in part] for part in _parts(entries, cap)]


@pytest.mark.parametrize(("sizes", "cap", "parts"), [
    ([3, 3, 3, 3], 7, [[0, 1], [2, 3]]),
    ([3, 3, 3, 3], 6, [[0, 1], [2, 3]]),  # at the cap exactly: still one part
    ([2, 20, 2], 5, [[0], [1], [2]]),  # an entry over the cap is a part alone
    ([None, None], 4, [[0, 1]]),  # entries without keys merge (their ranges stand)
    ([3, None, None, 3], 40, [[0], [1, 2], [3]]),  # never with entries with keys
    ([], 4, []),
])
def test_a_group_is_cut_into_parts_whose_keys_fit_the_cap(
        sizes: list[int | None], cap: int, parts: list[list[int]]) -> None:
    assert _cut(sizes, cap) == parts
