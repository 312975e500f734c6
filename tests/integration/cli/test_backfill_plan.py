"""Backfill planning (pure): chunk bounds, date handling, idempotency keys; retention ages."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engage_sync.adapters.wiring import open_state
from engage_sync.cli.backfill import (
    Chunk,
    idempotency_key,
    options_hash,
    parameters,
    parse_bound,
    plan,
)
from engage_sync.errors import ConfigError
from engage_sync.state import retention

D = datetime(2024, 1, 1, tzinfo=UTC)


def test_the_readme_range_is_91_daily_chunks_covering_the_last_day() -> None:
    chunks = plan(parse_bound("2024-01-01", is_end=False), parse_bound("2024-03-31", is_end=True),
                  "1d")
    assert len(chunks) == 91
    assert chunks[0] == Chunk(D, D + timedelta(days=1))
    assert chunks[-1].end == datetime(2024, 4, 1, tzinfo=UTC)  # 31 March included


@given(start_s=st.integers(0, 10**7), length_s=st.integers(1, 10**7),
       size_s=st.integers(1, 10**6))
def test_chunks_are_adjacent_half_open_and_cover_the_range(
    start_s: int, length_s: int, size_s: int
) -> None:
    start = D + timedelta(seconds=start_s)
    end = start + timedelta(seconds=length_s)
    size = timedelta(seconds=size_s)
    if -(-length_s // size_s) > 10_000:
        with pytest.raises(ConfigError):
            plan(start, end, size)
        return
    chunks = plan(start, end, size)
    assert chunks[0].start == start and chunks[-1].end == end
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    assert all(start < c.end <= c.start + size for c in chunks)


@pytest.mark.parametrize(("text", "is_end", "expected"), [
    ("2024-01-31", False, datetime(2024, 1, 31, tzinfo=UTC)),
    ("2024-01-31", True, datetime(2024, 2, 1, tzinfo=UTC)),
    ("2024-01-31T12:30:00", True, datetime(2024, 1, 31, 12, 30, tzinfo=UTC)),
    ("2024-01-31T12:30:00+02:00", False, datetime(2024, 1, 31, 10, 30, tzinfo=UTC)),
])
def test_bounds_are_utc_and_a_date_end_includes_its_day(
    text: str, is_end: bool, expected: datetime
) -> None:
    assert parse_bound(text, is_end=is_end) == expected


@pytest.mark.parametrize(("start", "end", "chunk", "words"), [
    ("2024-01-31", "2024-01-01", "1d", "not after"),
    ("yesterday", "2024-01-01", "1d", "not a date"),
    ("2024-01-01", "2024-01-02", "0s", "too small"),
    ("2024-01-01", "2025-01-01", "1s", "too many"),
])
def test_bad_ranges_say_what_to_change(start: str, end: str, chunk: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        plan(parse_bound(start, is_end=False), parse_bound(end, is_end=True), chunk)


def test_idempotency_keys_name_integration_bounds_and_options() -> None:
    a, b = Chunk(D, D + timedelta(days=1)), Chunk(D + timedelta(days=1), D + timedelta(days=2))
    plain, resend = options_hash(False, None), options_hash(True, None)
    keys = {idempotency_key(i, c, o) for i in ("users", "events") for c in (a, b)
            for o in (plain, resend, options_hash(False, "again"))}
    assert len(keys) == 12  # every difference makes a different run
    assert idempotency_key("users", a, plain) == idempotency_key("users", a, options_hash(
        False, None))  # a repeated command: the same keys
    assert parameters(a, True) == {"mode": "backfill", "start": "2024-01-01T00:00:00+00:00",
                                   "end": "2024-01-02T00:00:00+00:00", "dry_run": False,
                                   "resend_events": True}
    assert parameters(a, False, partitions=4)["partitions"] == 4  # each chunk partitioned


def test_retention_prunes_old_row_errors_and_keeps_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_state(f"sqlite:///{tmp_path / 'state.db'}")
    run_id = store.open_run("users", "incremental", None, None)
    store.record_rejects(run_id, "users", [('["a"]', "u1", "bad JSON"), ('["b"]', "u2", "bad")])
    store.finish_run(run_id, "partial")
    now = datetime.now(UTC)
    assert retention.prune(store, timedelta(days=30), now=lambda: now) == 0
    assert retention.prune(store, now=lambda: now + timedelta(days=31)) == 2  # default 30 days
    assert store.errors("users") == []
    assert store.count_runs("users") == 1
    assert store.run(run_id)["rows_rejected"] == 2  # the run's record keeps its counts

    monkeypatch.setenv(retention.RETENTION_ENV, "12h")
    assert retention.retention() == timedelta(hours=12)
    assert retention.retention("7d") == timedelta(days=7)  # the flag wins
    for bad in ("soon", "0s"):
        with pytest.raises(ConfigError):
            retention.retention(bad)
