"""A large DuckDB window read in slices of its cursor column (`read.duckdb_slices`) gives the
same rows in the same order as the whole window in one query: ties on UPDATED_AT that span
a cut, NULL cursors, a window that starts mid-timestamp, a backfill's bounds, the hour the
clocks go back; a window whose rows count each other (LATER_ROWS) is sliced too; a configured
query is read whole; the file is closed once read; DuckDB's own errors are the read's."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from engage_sync.cursor.window import Window
from engage_sync.errors import SourceError
from engage_sync.read import duckdb_slices, extract
from engage_sync.read.extract import SourceSpec, stream_batches
from tests.integration.duckdb_reads import count_reads

T = datetime(2026, 5, 1, 12, 0)
ROWS = 1_000


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'slices.duckdb'}")
    order = list(range(ROWS))
    random.Random(7).shuffle(order)  # stored out of order: the sort is real
    with engine.begin() as conn:
        conn.exec_driver_sql('CREATE TABLE src ("UPDATED_AT" TIMESTAMP, "KEY" VARCHAR, '
                             '"USER" VARCHAR, "PAYLOAD" VARCHAR)')
        conn.execute(sa.text("INSERT INTO src VALUES (:t, :k, :u, :p)"), [
            {"t": None if i % 97 == 0 else T + timedelta(seconds=i // 40),  # 40-row ties
             "k": f"k{i:05d}", "u": f"u{i % 50}", "p": f'{{"n": {i}}}'} for i in order])
    yield engine
    engine.dispose()


SPEC = SourceSpec(integration="slices", table="src", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("KEY",),
                  columns=("UPDATED_AT", "KEY", "USER", "PAYLOAD"))


def _read(engine: sa.Engine, spec: SourceSpec, window: Window) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for batch in stream_batches(engine, spec, window, 64)
            for row in batch.to_pylist()]


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Slices of 100 rows; counts the queries each read sends to DuckDB."""
    return count_reads(monkeypatch, 100)


WINDOWS = {
    "everything": Window(start=None, signpost=None),
    "from mid-timestamp, to a signpost": Window(start=(T + timedelta(seconds=3), "k00130"),
                                                signpost=T + timedelta(seconds=20)),
    "a backfill's bounds": Window(start=None, signpost=T + timedelta(days=1),
                                  floor=T + timedelta(seconds=5),
                                  before=T + timedelta(seconds=17)),
}


@pytest.mark.parametrize("name", list(WINDOWS))
def test_a_sliced_window_reads_the_rows_of_the_whole_query_in_its_order(
        engine: sa.Engine, queries: list[int], name: str) -> None:
    window = WINDOWS[name]
    sliced = _read(engine, SPEC, window)
    assert len(queries) > 3  # it was cut
    with engine.connect() as conn:
        query = extract.build_query(SPEC, extract.resolve_columns(conn, SPEC), window)
        whole = [tuple(r) for r in conn.execute(query)]
    assert sliced == whole and len(whole) > 300
    assert len({r[1] for r in sliced}) == len(sliced)  # each row once
    if window.signpost is None:  # NULL cursors come last, as the whole query sorts them
        assert sum(r[0] is None for r in sliced) == 11 and sliced[-1][0] is None


def test_a_window_whose_rows_count_each_other_is_sliced_with_the_rows_beyond(
        engine: sa.Engine, queries: list[int]) -> None:
    """LATER_ROWS over slices (`duckdb_later`; its own tests compare random tables)."""
    spec = replace(SPEC, superseded_by=("USER",))
    rows = _read(engine, spec, Window(start=None, signpost=T + timedelta(days=1)))
    assert len(queries) > 3 and len(rows) == ROWS - 11
    latest = [r for r in rows if r[-1] == 0]
    assert len(latest) == 50  # one latest row per user over the whole window


def test_a_small_window_is_one_query(engine: sa.Engine, queries: list[int]) -> None:
    rows = _read(engine, SPEC, Window(start=None, signpost=T + timedelta(seconds=1)))
    assert len(rows) == 80 - 1 and len(queries) == 1  # i=0 has a NULL cursor


def test_cuts_are_distinct_values_that_split_the_sample_in_parts() -> None:
    assert duckdb_slices.cuts(list(range(100)), 4) == [25, 50, 75]
    assert duckdb_slices.cuts([1] * 50 + [2] * 50, 4) == [1, 2]  # ties: fewer, distinct cuts
    assert duckdb_slices.cuts([5], 3) == [5]


def test_a_window_read_to_its_end_gives_duckdb_back_its_memory(engine: sa.Engine) -> None:
    """The file is closed once the window is read (its buffers freed before the run settles
    and its field helper writes); a read stopped early keeps its connection to the end."""
    batches = stream_batches(engine, SPEC, Window(start=None, signpost=None), 64)
    next(batches)
    assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    rest = sum(b.num_rows for b in batches)
    assert rest == ROWS - 64
    assert engine.pool.checkedout() == 0 and engine.pool.checkedin() == 0  # type: ignore[attr-defined]
    assert len(_read(engine, SPEC, Window(start=None, signpost=None))) == ROWS  # opens again


def test_cuts_in_the_hour_the_clocks_go_back_keep_their_order(
        tmp_path: Path, queries: list[int]) -> None:
    """TIMESTAMPTZ comes back in the session's zone: the repeated hour of 2 November 2025 in
    New York must be cut by instant, not by wall-clock time (else slices overlap: rows twice,
    out of order)."""
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'dst.duckdb'}")
    sa.event.listen(engine, "connect", lambda dbapi, _record: dbapi.execute(
        "SET TimeZone = 'America/New_York'"))
    start = datetime(2025, 11, 2, 5, 0, tzinfo=UTC)  # 01:00 EDT; 06:00Z is 01:00 EST
    shuffle = random.Random(3)
    with engine.begin() as conn:
        conn.exec_driver_sql('CREATE TABLE src ("UPDATED_AT" TIMESTAMPTZ, "KEY" VARCHAR, '
                             '"USER" VARCHAR, "PAYLOAD" VARCHAR)')
        conn.execute(sa.text("INSERT INTO src VALUES (:t, :k, 'u', '{}')"), [
            {"t": start + timedelta(seconds=shuffle.randrange(7200)), "k": f"k{i:05d}"}
            for i in range(ROWS)])
    try:
        rows = _read(engine, SPEC, Window(start=None, signpost=start + timedelta(days=1)))
    finally:
        engine.dispose()
    assert len(queries) > 3
    assert len(rows) == ROWS and len({r[1] for r in rows}) == ROWS
    instants = [r[0].astimezone(UTC) for r in rows]  # one zone's datetimes: by wall clock
    assert instants == sorted(instants)


def test_a_window_whose_sample_holds_no_cursor_value_is_read_whole(
        engine: sa.Engine, queries: list[int]) -> None:
    """Only NULL cursors (no signpost keeps them): nothing to cut at, one query."""
    with engine.begin() as conn:
        conn.exec_driver_sql('UPDATE src SET "UPDATED_AT" = NULL')
    rows = _read(engine, SPEC, Window(start=None, signpost=None))
    assert len(rows) == ROWS and len(queries) == 1


def test_a_configured_query_is_read_in_one_query(engine: sa.Engine, queries: list[int]) -> None:
    spec = replace(SPEC, table=None, query='SELECT * FROM src WHERE "KEY" < \'k00900\'')
    rows = _read(engine, spec, Window(start=None, signpost=T + timedelta(days=1)))
    assert len(rows) == 900 - 10 and len(queries) == 1  # 10 of the first 900 have no cursor


def test_slices_hold_slice_rows_each_but_are_at_most_max_slices() -> None:
    assert duckdb_slices.slice_count(1_000_000, 250_000) == 4
    assert duckdb_slices.slice_count(1_000_001, 250_000) == 5
    assert duckdb_slices.slice_count(100_000_000, 62_500) == duckdb_slices.MAX_SLICES == 64


@pytest.mark.parametrize("raised", [OSError, pa.ArrowInvalid])
def test_duckdb_failing_after_its_first_batches_is_the_same_read_error(
        engine: sa.Engine, monkeypatch: pytest.MonkeyPatch, raised: type[Exception]) -> None:
    """DuckDB out of memory while it merges a large sort fails after the first batches, and
    its Arrow reader raises it as OSError (seen at 1.5M rows of 200 bytes read in one query
    under 52-60 MB, after 92,000-230,000 rows), not as duckdb.Error: the read's error all the
    same, after the batches that came."""
    whole = extract._duckdb_batches

    def failing(*args: Any) -> Any:
        yield next(whole(*args))
        raise raised("Out of Memory Error: failed to pin block of size 256.0 KiB (49.3 "
                     "MiB/49.5 MiB used)")

    monkeypatch.setattr(extract, "_duckdb_batches", failing)
    came = 0
    with pytest.raises(SourceError) as error:
        for batch in stream_batches(engine, SPEC, Window(start=None, signpost=None), 64):
            came += batch.num_rows
    said = str(error.value)
    assert came == 64 and said.startswith("integration slices: reading table src from the "
                                          "warehouse (duckdb ")
    assert "?memory_limit=1GB (or more) on warehouse.url" in said
    assert "the rows sent before it are settled" in said


@pytest.mark.parametrize(("spec", "why"), [
    (SPEC, None),
    (replace(SPEC, superseded_by=("USER",)), None),  # sliced, with the rows beyond
    (replace(SPEC, table=None, query='SELECT * FROM src'), "a SQL query source is sorted whole"),
    # a query is read whole whatever superseded_rows says
    (replace(SPEC, table=None, query='SELECT * FROM src', superseded_by=("USER",)),
     "a SQL query source is sorted whole"),
], ids=["sliced", "later-rows", "query", "query-with-later-rows"])
def test_duckdb_out_of_memory_is_a_read_error_that_says_what_to_set(
        tmp_path: Path, spec: SourceSpec, why: str | None) -> None:
    """DuckDB's own errors from its Arrow reader become the read's error, naming the
    integration, the table and the setting to change; a SQL query source's also says that it
    is never read in slices (and nothing of superseded_rows, which would not change that)."""
    path = tmp_path / "small.duckdb"
    maker = sa.create_engine(f"duckdb:///{path}")
    with maker.begin() as conn:
        conn.exec_driver_sql(
            'CREATE TABLE src AS SELECT TIMESTAMP \'2024-01-01\' + to_microseconds('
            'CAST(hash(i) % 1000000000 AS BIGINT)) AS "UPDATED_AT", \'k\' || i AS "KEY", '
            '\'u\' AS "USER", repeat(\'x\', 200) AS "PAYLOAD" FROM range(100000) r(i)')
    maker.dispose()
    engine = sa.create_engine(f"duckdb:///{path}?memory_limit=4MB&threads=1")
    try:
        with pytest.raises(SourceError) as error:
            _read(engine, spec, Window(start=None, signpost=None))
    finally:
        engine.dispose()
    said = str(error.value)
    what = "the configured query" if spec.query else "table src"
    assert said.startswith(f"integration slices: reading {what} from the warehouse")
    assert "Out of Memory" in said and "?memory_limit=1GB (or more) on warehouse.url" in said
    assert (why in said) if why else ("sorted whole" not in said)
    assert "superseded_rows" not in said
