"""A row error keeps its row's key values as the source holds them (pure): taken
from a cursor position (a reject, a row in flight at a crash), never from a request's."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from engage_sync.cursor.null_keys import NULL_KEY
from engage_sync.cursor.progress import encode_cursor
from engage_sync.state.row_errors import (
    crash_position,
    cursor_key_values,
    item_of,
    reject_position,
    request_position,
    unmapped_position,
)

AT = datetime(2026, 1, 1, 12, 0)
CURSOR = (AT, 42, "a|b#1", NULL_KEY)


@pytest.mark.parametrize("position, expected", [
    (reject_position(CURSOR, 0), encode_cursor(CURSOR[1:])),
    (reject_position(CURSOR, 3), encode_cursor(CURSOR[1:])),  # the tie's `#3` dropped
    (crash_position(CURSOR), encode_cursor(CURSOR[1:])),
    (request_position(7, 2), None),
    (unmapped_position(7, 0), None),
])
def test_key_values_come_from_a_cursor_position_only(position: str, expected: str | None
                                                     ) -> None:
    assert cursor_key_values(position) == expected


def test_a_key_value_with_the_render_separators_stays_one_value() -> None:
    kept = cursor_key_values(reject_position(CURSOR, 1))
    assert kept is not None and json.loads(kept) == [42, "a|b#1", {"null": True}]


@pytest.mark.parametrize("position, k", [
    (request_position(3, 0), 0), (request_position(12, 74), 74),
    (unmapped_position(3, 1), None), (reject_position(CURSOR, 0), None)])
def test_the_item_of_a_request_position(position: str, k: int | None) -> None:
    assert item_of(position) == k


