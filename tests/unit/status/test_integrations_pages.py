"""Pages of the integrations list (`status/integrations.page_of`, pure): the service's Link
rules, and a cursor that still works when files come and go."""

from __future__ import annotations

import pytest

from engage_sync.status.integrations import decode_cursor, encode_cursor, page_of
from engage_sync.status.record import InvalidCursor

NAMES = [f"n{k:02d}" for k in range(25)]


def test_pages_follow_next_then_prev_back() -> None:
    first, prev, nxt = page_of(NAMES, None)
    assert (first, prev) == (NAMES[:10], None) and nxt is not None
    second, prev2, nxt2 = page_of(NAMES, nxt)
    assert second == NAMES[10:20] and page_of(NAMES, prev2)[0] == first
    last, _, none = page_of(NAMES, nxt2)
    assert (last, none) == (NAMES[20:], None)


def test_ten_or_fewer_have_no_links() -> None:
    assert page_of(NAMES[:10], None) == (NAMES[:10], None, None)


def test_a_cursor_outlives_the_file_it_names() -> None:
    cursor = encode_cursor("n10")
    assert page_of([n for n in NAMES if n != "n10"], cursor)[0][0] == "n11"


@pytest.mark.parametrize("bad", ["%%", "", encode_cursor("x")[:-1] + "!", "czEw"])
def test_a_cursor_this_module_did_not_make_is_refused(bad: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(bad)
