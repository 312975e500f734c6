"""The keys a backfill of events takes as sent, held as sorted 128-bit hashes (pure)."""

from __future__ import annotations

import gc
import random
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from engage_sync.read import sent_rows
from engage_sync.read.sent_rows import SentKeys, SentRows


def keys(n: int, prefix: str = "e") -> list[str]:
    return [f"{prefix}{i:09d}" for i in range(n)]


def test_every_key_held_is_found_and_no_other() -> None:
    held = keys(50_000)
    others = [*keys(50_000, prefix="f"), "", "e", "é000000001", "e000000001 "]
    sent = SentKeys(held)
    assert len(sent) == 50_000
    asked = held + others
    random.Random(3).shuffle(asked)
    expected = set(held)
    assert sent.contains_many(asked) == [k in expected for k in asked]


def test_the_hashes_are_kept_in_their_byte_order() -> None:
    """numpy sorts 16-byte strings as memcmp does, which the binary search on the first half
    relies on: a numpy that changed that would fail here before a backfill sends twice."""
    sent = SentKeys(keys(20_000))
    high, low = sent._high, sent._low
    assert np.all((high[1:] > high[:-1]) | ((high[1:] == high[:-1]) & (low[1:] >= low[:-1])))


def test_keys_sent_twice_and_an_empty_set() -> None:
    sent = SentKeys(["a", "b", "a", "a", "lone \ud800 surrogate"])
    assert sent.contains_many(["a", "b", "c", "lone \ud800 surrogate", "lone \ud801 surrogate"]
                              ) == [True, True, False, True, False]
    assert SentKeys().contains_many(["a"]) == [False]
    assert sent.contains_many([]) == []


def test_keys_whose_hashes_share_their_first_half(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rare case of several hashes with one first half: each is told apart by its second
    half (forced here by a hash whose first 8 bytes are the same for every key)."""
    from engage_sync.read.sent_rows import _DIGEST

    monkeypatch.setattr(sent_rows, "_DIGEST",
                        lambda data, seed: bytes(8) + _DIGEST(data, seed)[8:])
    sent = SentKeys(["x1", "x2", "x3", "x2"])
    assert sent.contains_many(["x2", "x4", "x3", "x1", "x5"]) == [
        True, False, True, True, False]


def test_rows_of_an_entry_without_keys_are_sent_by_its_range() -> None:
    entries = iter([((0,), (10,), ["k1", "k2"]), ((10,), (20,), None),
                    ((20,), (30,), ["k3"])])
    rows = SentRows.from_entries(entries)
    asked: list[tuple[Any, str]] = [((5,), "k1"), ((15,), "new"), ((25,), "new"),
                                    ((25,), "k3"), ((10,), "new"), ((21,), "k2")]
    assert rows.contains_many(asked) == [True, True, False, True, False, True]


def test_entries_are_read_one_at_a_time() -> None:
    """`from_entries` consumes a stream (the journal's, fetched a few entries at a time) and
    lets each entry's keys go once they are hashed: when the fifth is read, the first three
    are gone (a reader that listed the entries first would keep them all)."""
    class Keys(list[str]):
        pass

    gone: list[bool] = []
    refs: list[weakref.ref[Keys]] = []

    def stream() -> Iterator[tuple[Any, Any, Any]]:
        for k in range(5):
            gc.collect()
            gone.append(all(r() is None for r in refs[:-1]))
            keys = Keys(f"key{k}-{j}" for j in range(3))
            refs.append(weakref.ref(keys))
            yield (k,), (k + 1,), keys
            del keys

    rows = SentRows.from_entries(stream())
    assert gone == [True] * 5
    assert rows.contains_many([((9,), "key1-2"), ((9,), "key5-0")]) == [True, False]


def test_siblings_share_one_copy_built_once_and_let_go_with_the_last() -> None:
    """Callers with the same key get the one copy built for the first (with its `top`), also
    those that ask while it is being built; another key gets its own; once nobody holds a
    copy, the next caller builds afresh."""
    builds: list[str] = []
    building, go = threading.Event(), threading.Event()

    def build(name: str, top: tuple[int, ...]) -> Any:
        def make() -> SentRows:
            builds.append(name)
            building.set()
            assert go.wait(10)
            return SentRows.from_entries([(None, top, [f"{name}-1", f"{name}-2"])], top)
        return make

    got: list[SentRows] = []

    def ask() -> None:
        got.append(sent_rows.shared(("state", "events", "parent-1"), build("p1", (1,))))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    threads[0].start()
    assert building.wait(10)  # the first is building; the others ask meanwhile
    for t in threads[1:]:
        t.start()
    time.sleep(0.2)
    go.set()
    for t in threads:
        t.join()
    first = got[0]
    assert builds == ["p1"] and len(got) == 4 and all(g is first for g in got)
    assert first.top == (1,)
    assert first.keys.contains_many(["p1-1", "p1-2", "p2-1"]) == [True, True, False]
    other = sent_rows.shared(("state", "events", "parent-2"), build("p2", (2,)))
    assert other is not first and other.top == (2,) and builds == ["p1", "p2"]
    gone = weakref.ref(first)
    got.clear()
    del first
    assert gone() is None  # no cycle holds it: let go at once
    again = sent_rows.shared(("state", "events", "parent-1"), build("p1", (3,)))
    assert builds == ["p1", "p2", "p1"] and again.top == (3,)
