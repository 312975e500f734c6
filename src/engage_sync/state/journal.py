"""The request journal: one entry per request a run sent, from before it leaves (`pending`) to
how it ended (`acked`, `failed` or `in_doubt`).

Part of `StateStore` (a mixin using only `self.engine`); the functions taking a `Connection`
are the pieces of the store's transactions that also write runs and row errors. Invariants:
- entries of one run cover contiguous ranges of the source order: entry n covers rows with
  cursor in (end of entry n-1, end of entry n];
- compacting a run's journal (finished, or while it runs: its settled stretches) keeps its
  ranges, its counts and its highest request number, never merges an entry of more than
  `MERGED_ITEMS` items again, and writes no merged entry whose item keys pass
  `MERGED_KEYS_CHARS` (an entry over it stays as it was).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Iterator, Sequence
from itertools import pairwise
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, Row

from engage_sync.cursor.progress import decode_cursor, encode_cursor
from engage_sync.state.partitions import own_runs
from engage_sync.state.records import JournalEntry, Settlement
from engage_sync.state.row_errors import request_position
from engage_sync.state.runs import update_run
from engage_sync.state.schema import SETTLED, journal, retries, runs

MERGED_KEYS_CHARS = 8_000_000
"""Item keys (characters of their JSON text) one merged entry holds at most: about 600,000
keys of a dozen characters. A run's whole journal merged into one entry grew with the run: its
compaction held every key twice at the run's end, a backfill parses an entry's keys at once,
and a value passes SQLite's and PostgreSQL's 1 GB limit at some 25,000,000 keys of 40
characters."""
KEYS_FETCHED = 500  # entries whose keys one query of a compaction reads; also the entries of
# at most MERGED_ITEMS items a backfill's read of the sent keys fetches at once
ENTRIES_FETCHED = 4  # merged entries a backfill's read of the sent keys holds at once: each
# holds up to MERGED_KEYS_CHARS of keys (but those an older release merged whole may hold
# more), so some 32 MB of text
MERGED_ITEMS = 1000  # an entry of more items than this is a merged one (a request holds 75)

# built once: a run journals and settles each request (SQLAlchemy keys its compiled-SQL cache
# on the statement, which costs more than the execution when the statement is new each time)
_INSERT = journal.insert()
_SETTLE = (journal.update()
           .where(journal.c.run_id == sa.bindparam("b_run"),
                  journal.c.req_no == sa.bindparam("b_req"))
           .values(state=sa.bindparam("b_state"), synced=sa.bindparam("b_synced"),
                   failed=sa.bindparam("b_failed"), in_doubt=sa.bindparam("b_doubt"),
                   reason=sa.bindparam("b_reason")))


def insert_pending(conn: Connection, run_id: str, entries: Sequence[JournalEntry]) -> None:
    """Journal requests about to be sent (state `pending`)."""
    if not entries:
        return
    conn.execute(_INSERT, [
        {"run_id": run_id, "req_no": e.req_no, "start_cursor": encode_cursor(e.start),
         "end_cursor": encode_cursor(e.end), "state": "pending", "item_count": e.items,
         "synced": 0, "failed": 0, "in_doubt": 0,
         "item_keys": None if e.keys is None else json_text(e.keys),
         "item_key_values": None if e.key_values is None else json_text(e.key_values)}
        for e in entries
    ])


def json_text(values: Sequence[str | None]) -> str:
    """A JSON array of texts (keys, key values), by orjson (a run journals 75 for each
    request, and orjson is several times faster than `json`); by `json` if orjson refuses (a
    lone surrogate)."""
    try:
        return orjson.dumps(values).decode()
    except orjson.JSONEncodeError:
        return json.dumps(values)


def settle_entries(conn: Connection, run_id: str, settlements: Sequence[Settlement]) -> None:
    """Write how journaled requests ended (their state and row counts)."""
    if not settlements:
        return
    assert all(s.state in SETTLED for s in settlements)
    conn.execute(
        _SETTLE,
        [{"b_run": run_id, "b_req": s.req_no, "b_state": s.state, "b_synced": s.synced,
          "b_failed": len(s.failed), "b_doubt": len(s.in_doubt),
          "b_reason": s.reason} for s in settlements])


def pending_entries(conn: Connection, run_id: str) -> Sequence[Row[Any]]:
    """(req_no, item_keys, item_key_values) of the run's entries still pending (left in
    flight by a crash)."""
    return conn.execute(sa.select(journal.c.req_no, journal.c.item_keys,
                                  journal.c.item_key_values).where(
        journal.c.run_id == run_id, journal.c.state == "pending")).all()


def delete_pending(conn: Connection, run_id: str, req_nos: Sequence[int] | None = None) -> int:
    """Delete the run's pending entries (only those numbered `req_nos`, if given)."""
    chosen = sa.true() if req_nos is None else journal.c.req_no.in_(list(req_nos))
    return int(conn.execute(journal.delete().where(
        journal.c.run_id == run_id, journal.c.state == "pending", chosen)).rowcount)


def pending_in_doubt(conn: Connection, run_id: str, reason: str) -> None:
    """Settle the run's pending entries as in doubt: all their items, for `reason`."""
    conn.execute(journal.update().where(
        journal.c.run_id == run_id, journal.c.state == "pending",
    ).values(state="in_doubt", in_doubt=journal.c.item_count, reason=reason))


def named_items(entries: Sequence[Any], reason: str) -> list[tuple[str, str, str]]:
    """Row errors naming the items of journal entries (req_no, item_keys) that kept keys."""
    return [(request_position(r.req_no, k), key, reason) for r in entries
            if r.item_keys is not None for k, key in enumerate(json.loads(r.item_keys))]


def named_key_values(entries: Sequence[Any]) -> dict[str, str | None]:
    """The key values of the items `named_items` names, by position (none when not kept)."""
    return {request_position(r.req_no, k): values for r in entries
            if r.item_key_values is not None
            for k, values in enumerate(json.loads(r.item_key_values))}


class Journal:
    """The StateStore's methods that read the journal, or write only the journal."""

    engine: Engine

    def journal_entries(self, run_id: str) -> list[JournalEntry]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(journal.c.req_no, journal.c.start_cursor, journal.c.end_cursor,
                          journal.c.state, journal.c.item_count)
                .where(journal.c.run_id == run_id).order_by(journal.c.req_no)
            ).all()
        return [JournalEntry(r.req_no, decode_cursor(r.start_cursor),
                             decode_cursor(r.end_cursor) or (), r.item_count, r.state)
                for r in rows]

    def frontier(self, run_id: str, after: tuple[Any, ...] | None
                 ) -> tuple[list[JournalEntry], int]:
        """What a resumed run needs of its journal: the settled entries whose range ends after
        `after` (its progress: every row at or before it is settled and not read again), in
        no particular order, and the run's highest request number (0 if none). The entries
        are streamed `KEYS_FETCHED` at a time and those the progress passed are dropped as
        they come, so the memory held is the frontier's (bounded by what was in flight at the
        crash), not the settled journal's."""
        with self.engine.connect() as conn:
            highest = conn.execute(sa.select(sa.func.max(journal.c.req_no))
                                   .where(journal.c.run_id == run_id)).scalar()
            result = conn.execution_options(
                stream_results=True, max_row_buffer=KEYS_FETCHED).execute(
                sa.select(journal.c.req_no, journal.c.start_cursor, journal.c.end_cursor,
                          journal.c.state, journal.c.item_count)
                .where(journal.c.run_id == run_id, journal.c.state != "pending"))
            kept: list[JournalEntry] = []
            for part in result.partitions(KEYS_FETCHED):
                for r in part:
                    end = decode_cursor(r.end_cursor) or ()
                    if after is None or end > after:
                        kept.append(JournalEntry(r.req_no, decode_cursor(r.start_cursor),
                                                 end, r.item_count, r.state))
        return kept, int(highest or 0)

    def settled_ranges(self, integration: str, modes: Sequence[str]
                       ) -> list[tuple[tuple[Any, ...] | None, tuple[Any, ...], Any]]:
        """(start, end] cursor ranges of requests that runs of these modes (or their
        partitions) sent and the service acknowledged or may have processed (in doubt), or
        that failed and are kept to be sent again (`retries`: they will be, or were parked),
        entries of at most `MERGED_ITEMS` items first, then larger (merged) ones, in no other
        order, each with the row keys of its items (None when the journal did not keep them).
        Partitions' ranges overlap each other; their keys do not."""
        return list(self.settled_entries(integration, modes))

    def settled_entries(self, integration: str, modes: Sequence[str]
                        ) -> Generator[tuple[tuple[Any, ...] | None, tuple[Any, ...], Any]]:
        """`settled_ranges` one entry at a time: a backfill reads every key incremental runs
        sent, never all of their text at once. Entries of at most `MERGED_ITEMS` items (single
        requests) are fetched `KEYS_FETCHED` at a time, larger (merged) ones `ENTRIES_FETCHED`
        at a time. Close the generator if it is left before its end (its connection)."""
        settled = sa.and_(
            own_runs(integration), runs.c.mode.in_(list(modes)),
            sa.or_(journal.c.state.in_(["acked", "in_doubt", "pending"]),
                   sa.exists().where(retries.c.run_id == journal.c.run_id,
                                     retries.c.req_no == journal.c.req_no)))
        size = journal.c.item_count > MERGED_ITEMS
        with self.engine.connect() as conn:
            for merged, fetched in ((False, KEYS_FETCHED), (True, ENTRIES_FETCHED)):
                result = conn.execution_options(
                    stream_results=True, max_row_buffer=fetched).execute(
                    sa.select(journal.c.start_cursor, journal.c.end_cursor,
                              journal.c.item_keys)
                    .join(runs, runs.c.run_id == journal.c.run_id)
                    .where(settled, size if merged else sa.not_(size)))
                for part in result.partitions(fetched):
                    for r in part:
                        yield (decode_cursor(r[0]), decode_cursor(r[1]) or (),
                               None if r[2] is None else json.loads(r[2]))

    def compact_journal(self, run_id: str, max_chars: int = MERGED_KEYS_CHARS,
                        owner: str | None = None) -> int:
        """Merge a run's acknowledged, error-free requests that follow each other in the
        source order (`_fresh`) into one entry per `max_chars` of item keys, the entry of the
        part's highest request number: the ranges (which backfills and a resumed run consult)
        and the counts stay the same, the journal keeps a row per stretch of the run, not one
        per request, and a resumed run, which numbers its requests after its highest settled
        one, never numbers one again. Safe while the run sends: a pending entry is merged with
        none; fenced on `owner` if given. The keys are read once, `KEYS_FETCHED` entries at a
        time (never the whole run's at once). Returns the number of entries removed."""
        with self.engine.begin() as conn:
            update_run(conn, run_id, owner)
            rows = conn.execute(sa.select(
                journal.c.req_no, journal.c.start_cursor, journal.c.end_cursor,
                journal.c.state, journal.c.failed, journal.c.in_doubt,
                journal.c.item_count, journal.c.synced,
            ).where(journal.c.run_id == run_id).order_by(journal.c.req_no)).all()
            removed: list[int] = []
            for group in (g for g in _mergeable(rows) if len(g) > 1):
                for part in _parts(_with_keys(conn, run_id, group), max_chars):
                    if len(part) < 2:
                        continue
                    entries = [r for r, _ in part]
                    kept = max(r.req_no for r in entries)
                    conn.execute(journal.update().where(
                        journal.c.run_id == run_id, journal.c.req_no == kept,
                    ).values(start_cursor=entries[0].start_cursor,
                             end_cursor=entries[-1].end_cursor,
                             item_count=sum(r.item_count for r in entries),
                             synced=sum(r.synced for r in entries),
                             item_keys=merged_keys(keys for _, keys in part),
                             item_key_values=None))  # kept only to name pending entries
                    removed += [r.req_no for r in entries if r.req_no != kept]
            for first, last in _stretches(removed):
                conn.execute(journal.delete().where(
                    journal.c.run_id == run_id, journal.c.req_no.between(first, last)))
        return len(removed)


def _with_keys(conn: Connection, run_id: str, group: Sequence[Any]
               ) -> Iterator[tuple[Any, str | None]]:
    """The group's entries, in its order, each with its item keys (JSON text, or None), read
    `KEYS_FETCHED` entries a query (by a range of numbers where they follow each other, as a
    run that was never resumed journals them)."""
    for i in range(0, len(group), KEYS_FETCHED):
        chunk = group[i:i + KEYS_FETCHED]
        numbers = [r.req_no for r in chunk]
        first, last = min(numbers), max(numbers)
        which = (journal.c.req_no.between(first, last) if last - first + 1 == len(numbers)
                 else journal.c.req_no.in_(numbers))
        keys = dict(conn.execute(sa.select(journal.c.req_no, journal.c.item_keys).where(
            journal.c.run_id == run_id, which)).tuples().all())
        yield from ((r, keys[r.req_no]) for r in chunk)


def _parts(entries: Iterable[tuple[Any, str | None]], max_chars: int
           ) -> Iterator[list[tuple[Any, str | None]]]:
    """A mergeable group's (entry, item keys) in order, cut into parts whose keys come to at
    most `max_chars` characters (an entry over it alone is a part alone), and where entries
    with keys meet entries without (a run resumed by another version): merged with one
    without, the keys of the others would be lost (`merged_keys`)."""
    part: list[tuple[Any, str | None]] = []
    chars = 0
    for entry, keys in entries:
        size = len(keys or "")
        if part and (chars + size > max_chars or (keys is None) != (part[-1][1] is None)):
            yield part
            part, chars = [], 0
        part.append((entry, keys))
        chars += size
    if part:
        yield part


def _stretches(numbers: Sequence[int]) -> list[tuple[int, int]]:
    """Ascending whole numbers as (first, last) of each stretch of consecutive ones: a
    compacted run's removed entries are one stretch or a few, deleted a statement each."""
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def _in_source_order(rows: Sequence[Any]) -> Sequence[Any]:
    """Entries in source order. In journal order each entry of a run that was never resumed
    starts where the one before ends, and a range's start is before its end, so that order is
    the source order: the cursors are then not decoded, which would lengthen a large run's
    end. A resumed run's journal may not chain: sorted by decoded end."""
    chained = all(r.start_cursor is not None and r.start_cursor == prev.end_cursor
                  for prev, r in pairwise(rows))
    return rows if chained else sorted(rows, key=lambda r: decode_cursor(r.end_cursor) or ())


def _fresh(r: Any) -> bool:
    """An entry compaction may merge: acked, error-free, of at most MERGED_ITEMS items (a
    larger one was merged before: a request holds at most 225)."""
    return bool(r.state == "acked" and not r.failed and not r.in_doubt
                and r.item_count <= MERGED_ITEMS)


def _mergeable(rows: Sequence[Any]) -> list[list[Any]]:
    """Entries (in journal order) in source order, grouped: a group is `_fresh` entries that
    follow each other (a range ending where the next starts); any other entry is a group alone
    (`_parts` then cuts a group by the size of its keys). An entry of more than MERGED_ITEMS
    items is never read again: a run compacted while it runs keeps an entry per stretch."""
    ordered = _in_source_order(rows)
    groups: list[list[Any]] = []
    prev: Any = None
    for r in ordered:
        if (prev is not None and r.start_cursor == prev.end_cursor and _fresh(r)
                and _fresh(prev)):
            groups[-1].append(r)
        else:
            groups.append([r])
        prev = r
    return groups


def merged_keys(keys: Iterable[str | None]) -> str | None:
    """The item keys of merged journal entries, in order: one JSON array of all of them, or
    None if one lacks them. Each is a JSON array (`insert_pending`), so their insides are
    joined as text: a run's compaction of 1,000,000 event keys takes milliseconds, where
    parsing and writing them again took a quarter of a second at the run's end."""
    insides: list[str] = []
    for text in keys:
        if text is None:
            return None
        text = text.strip()
        if not (text.startswith("[") and text.endswith("]")):  # never written so: parse it
            parsed = json.loads(text)
            if not isinstance(parsed, list):
                raise ValueError("a journal entry's item keys are not a JSON array")
            text = json.dumps(parsed)
        inside = text[1:-1].strip()
        if inside:
            insides.append(inside)
    return "[" + ", ".join(insides) + "]"
