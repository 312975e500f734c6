"""A finished run's journal compacted (`Journal.compact_journal`) on SQLite and PostgreSQL:
acknowledged requests that follow each other in the source order become one entry per
`max_chars` of item keys, never one entry for the whole run (whose keys a backfill parses at
once, and which passed the databases' 1 GB value limit on a large first load); the ranges, the
counts and every key, in order, stay."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from engage_sync.state import journal as journal_module
from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.schema import journal
from engage_sync.state.store import StateStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ITEMS = 10


def _at(n: int) -> tuple[datetime, str]:
    return (T0 + timedelta(seconds=n), f"ev-{n * ITEMS:05d}")


def _entry(req_no: int, block: int) -> JournalEntry:
    """Request `req_no` covers block `block` of the source: (block, block + 1]."""
    keys = tuple(f"EVENT_ID=ev-{block * ITEMS + j:05d}" for j in range(ITEMS))
    return JournalEntry(req_no, None if block == 0 else _at(block), _at(block + 1), ITEMS,
                        keys=keys, key_values=tuple(f'["{k[9:]}"]' for k in keys))


def _journaled(state: StateStore, blocks: list[int], in_doubt: frozenset[int] = frozenset(),
               finish: bool = True) -> tuple[str, list[str]]:
    """A run whose request i + 1 covers blocks[i], finished (so compacted at the default
    size) unless `finish` is False; returns the run and every key in source order."""
    run = state.open_run("events", "incremental", None, None)
    entries = [_entry(i + 1, b) for i, b in enumerate(blocks)]
    state.journal_pending(run, entries)
    state.settle(run, "events", [
        Settlement(e.req_no, "in_doubt", 0, reason="timeout") if e.req_no in in_doubt
        else Settlement(e.req_no, "acked", ITEMS) for e in entries], progress=None)
    if finish:
        state.finish_run(run, "success")
    keys = [k for b in sorted(blocks) for k in _entry(0, b).keys or ()]
    return run, keys


def _rows(state: StateStore, run: str) -> list[sa.Row[tuple[int, str, int, int]]]:
    with state.engine.connect() as conn:
        return list(conn.execute(
            sa.select(journal.c.req_no, journal.c.item_keys, journal.c.item_count,
                      journal.c.synced).where(journal.c.run_id == run)
            .order_by(journal.c.req_no)).all())


def test_a_finished_runs_journal_is_a_row_per_stretch_between_requests_in_doubt(
        state_both: StateStore) -> None:
    run, keys = _journaled(state_both, list(range(40)), in_doubt=frozenset({21}))
    rows = _rows(state_both, run)
    assert [r.req_no for r in rows] == [20, 21, 40]  # each stretch keeps its last number
    assert [k for r in rows for k in json.loads(r.item_keys)] == keys


def _chained(ranges: list[tuple[object, object, object]], last: object) -> bool:
    """Whether the ranges, sorted by end, cover the source from its beginning to `last`
    without a gap."""
    ordered = sorted(ranges, key=lambda r: r[1])  # type: ignore[arg-type,return-value]
    return (ordered[0][0] is None and ordered[-1][1] == last
            and all(b[0] == a[1] for a, b in itertools.pairwise(ordered)))


def test_a_run_is_compacted_into_parts_of_at_most_max_chars_of_keys(
        state_both: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "KEYS_FETCHED", 2)  # parts cross reads of keys
    run, keys = _journaled(state_both, list(range(40)), in_doubt=frozenset({21}), finish=False)
    doubtful = _rows(state_both, run)[20]
    one = max(len(r.item_keys) for r in _rows(state_both, run))
    cap = 3 * one + 5  # three entries' keys a part
    removed = state_both.compact_journal(run, max_chars=cap)
    rows = _rows(state_both, run)
    # requests 1-20 in 7 parts (six of 3, one of 2), 21 alone (in doubt), 22-40 in 7
    assert len(rows) == 15 and removed == 40 - 15
    assert all(len(r.item_keys) <= cap for r in rows)
    assert [k for r in rows for k in json.loads(r.item_keys)] == keys
    assert sum(r.item_count for r in rows) == 40 * ITEMS
    assert sum(r.synced for r in rows) == 39 * ITEMS
    assert rows[7] == doubtful  # the request in doubt, as it was
    ranges = state_both.settled_ranges("events", ["incremental"])
    assert len(ranges) == 15 and _chained(ranges, _at(40))


def test_a_resumed_runs_journal_out_of_source_order_keeps_its_keys_in_source_order(
        state_both: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume journaled later blocks before earlier ones: the parts follow the source
    order. Requests 1, 2, 5 and 6 (blocks 0-3) merge, their keys read by number (3 and 4 are
    not theirs: request 3, block 4, is in doubt) into 6, their highest number; 4 and 7
    (blocks 5 and 6) into 7."""
    monkeypatch.setattr(journal_module, "KEYS_FETCHED", 2)
    run, keys = _journaled(state_both, [0, 1, 4, 5, 2, 3, 6], in_doubt=frozenset({3}))
    rows = {r.req_no: r for r in _rows(state_both, run)}
    assert list(rows) == [3, 6, 7]
    assert [k for n in (6, 3, 7) for k in json.loads(rows[n].item_keys)] == keys
    assert [rows[n].item_count for n in (6, 3, 7)] == [4 * ITEMS, ITEMS, 2 * ITEMS]
    assert _chained(state_both.settled_ranges("events", ["incremental"]), _at(7))


def test_a_backfill_reads_single_and_merged_entries_a_few_at_a_time(
        state_both: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """`settled_entries`: every key of single requests and of merged entries (read apart, in
    reads of their own sizes), and its connection given back when it is left midway."""
    monkeypatch.setattr(journal_module, "KEYS_FETCHED", 2)
    monkeypatch.setattr(journal_module, "ENTRIES_FETCHED", 1)
    monkeypatch.setattr(journal_module, "MERGED_ITEMS", ITEMS)  # more than one request's
    _, keys = _journaled(state_both, list(range(40)), in_doubt=frozenset({21}))
    entries = list(state_both.settled_entries("events", ["incremental"]))
    assert len(entries[0][2]) == ITEMS  # the single ones first
    assert sorted(len(k) for _, _, k in entries[1:]) == [19 * ITEMS, 20 * ITEMS]
    assert sorted(k for _, _, ks in entries for k in ks) == sorted(keys)

    stream = state_both.settled_entries("events", ["incremental"])
    next(stream)
    assert state_both.engine.pool.checkedout() == 1
    stream.close()
    assert state_both.engine.pool.checkedout() == 0


def test_a_run_compacted_while_it_sends_keeps_a_pending_entry_and_merges_nothing_twice(
        state_both: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle work of a run the rate budget holds (`ExactSendLoop._idle`): requests 1-20 settled,
    21 still in flight. 1-20 merge, 21 stays pending, as the journal must name it after a
    kill; at the end 21-40 merge into a second entry, and the first is not read again."""
    monkeypatch.setattr(journal_module, "MERGED_ITEMS", ITEMS)  # more than one request's
    state = state_both
    run = state.open_run("events", "incremental", None, None)
    entries = [_entry(i + 1, i) for i in range(40)]
    state.journal_pending(run, entries[:21])
    state.settle(run, "events", [Settlement(e.req_no, "acked", ITEMS) for e in entries[:20]],
                 progress=None)
    assert state.compact_journal(run) == 19
    assert [(r.req_no, r.item_count) for r in _rows(state, run)] == [(20, 20 * ITEMS),
                                                                     (21, ITEMS)]
    assert [e.req_no for e in state.journal_entries(run) if e.state == "pending"] == [21]
    first = _rows(state, run)[0]
    state.journal_pending(run, entries[21:])
    state.settle(run, "events", [Settlement(e.req_no, "acked", ITEMS) for e in entries[20:]],
                 progress=None)
    state.finish_run(run, "success")
    rows = _rows(state, run)
    assert [r.req_no for r in rows] == [20, 40] and rows[0] == first
    keys = [k for b in range(40) for k in _entry(0, b).keys or ()]
    assert [k for r in rows for k in json.loads(r.item_keys)] == keys
    assert sum(r.synced for r in rows) == 40 * ITEMS
    assert _chained(state.settled_ranges("events", ["incremental"]), _at(40))


def test_a_compaction_keeps_the_runs_highest_request_number(state_both: StateStore) -> None:
    """Request 6 in flight, 7 and 8 acknowledged when the run compacts while it sends: 7-8
    merge into 8, so a run resumed after a crash (which numbers its requests after its highest
    settled one) never numbers a request 8 again, whose row errors would collide."""
    state = state_both
    run = state.open_run("events", "incremental", None, None)
    entries = [_entry(i + 1, i) for i in range(8)]
    state.journal_pending(run, entries)
    state.settle(run, "events", [Settlement(e.req_no, "acked", ITEMS) for e in entries
                                 if e.req_no != 6], progress=None)
    state.compact_journal(run)
    done = [e.req_no for e in state.journal_entries(run) if e.state != "pending"]
    assert sorted(done) == [5, 8] and max(done) == 8
    assert [r.req_no for r in _rows(state, run)] == [5, 6, 8]


def test_a_compaction_by_an_owner_that_lost_the_run_writes_nothing(
        state_both: StateStore) -> None:
    from engage_sync.errors import LeaseLost

    state = state_both
    run, _ = _journaled(state, list(range(4)), finish=False)
    before = _rows(state, run)
    with pytest.raises(LeaseLost):
        state.compact_journal(run, owner="another-process")
    assert _rows(state, run) == before
