"""A resumed run loads only its journal's frontier (`Journal.frontier`): the settled entries
after its progress, never those the progress passed, so a resume's memory does not grow with
how much was settled before the kill. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engage_sync.cursor.window import Window
from engage_sync.run.resume import Skipper, open_run
from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.store import StateStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ROWS = 10  # rows a request covers
ELSEWHERE = "elsewhere:1:aaaa0000"  # a dead owner on another host, without a lease


def _end(k: int) -> tuple[Any, ...]:
    """The end of request k's range (1-based): its last row's position."""
    return (T0 + timedelta(seconds=k * ROWS), f"u{k * ROWS:07d}")


def _killed(state: StateStore, rows: int) -> str:
    """The journal a kill leaves after `rows` rows: every request settled up to the progress,
    then one in flight (pending) and two settled after it (they ended first)."""
    n = rows // ROWS
    run = state.open_run("users", "incremental", None, None, owner=ELSEWHERE)
    entries = [JournalEntry(k, None if k == 1 else _end(k - 1), _end(k), ROWS)
               for k in range(1, n + 1)]
    state.journal_pending(run, entries)
    state.settle(run, "users", [Settlement(k, "acked", ROWS) for k in range(1, n + 1)
                                if k != n - 2], progress=_end(n - 3))
    return run


@pytest.mark.parametrize("resend", [False, True], ids=["skip", "resend"])
def test_a_resume_loads_the_same_frontier_after_1k_and_after_100k_settled_rows(
    state_both: StateStore, resend: bool
) -> None:
    loaded = {}
    for rows in (1_000, 100_000):
        run = _killed(state_both, rows)
        opened = open_run(state_both, "users", "incremental", None, resend,
                          lambda: pytest.fail("a new window"), lambda: None)
        assert opened.run_id == run
        n = rows // ROWS
        assert opened.window.start == _end(n - 3)
        assert opened.last_req == n  # the resumed run numbers its requests after every one
        loaded[rows] = sorted(e.req_no for e in opened.done)
        assert loaded[rows] == ([n - 1, n] if resend else [n - 2, n - 1, n])
        skipper = Skipper(opened.done, opened.window.start)  # asked in source order
        assert (skipper.settled(_end(n - 2)) is None) is resend  # in doubt (skip) is skipped
        assert skipper.settled(_end(n - 1)) is not None and skipper.settled(_end(n)) is not None
        state_both.finish_run(run, "success")
    assert len(loaded[1_000]) == len(loaded[100_000])


def test_the_frontier_of_a_run_that_settled_nothing_yet_is_every_settled_entry(
    state_both: StateStore
) -> None:
    """No progress yet (the first request still in flight): every settled entry is kept."""
    run = state_both.open_run("users", "incremental", None, None, owner=ELSEWHERE)
    state_both.journal_pending(run, [JournalEntry(k, None if k == 1 else _end(k - 1), _end(k),
                                                  ROWS) for k in (1, 2, 3)])
    state_both.settle(run, "users", [Settlement(k, "acked", ROWS) for k in (2, 3)])
    done, last = state_both.frontier(run, None)
    assert sorted(e.req_no for e in done) == [2, 3] and last == 3
    opened = open_run(state_both, "users", "incremental", None, False,
                      lambda: Window(start=None, signpost=None), lambda: None)
    assert sorted(e.req_no for e in opened.done) == [1, 2, 3]  # 1 now in doubt, named later
