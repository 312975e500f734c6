"""A DuckDB window whose rows count their user's later rows, read in slices
(`read.duckdb_later`), marks exactly the rows the whole window read in one query marks: the
same rows in the same order, and LATER_ROWS 0 for the same rows. Real DuckDB, random tables:
users with many rows or one, of one column or two, NULL users, ties on the cursor across cuts,
NULL cursors, NULL keys, the user as the key, a resumed window, a backfill's bounds, a
partition, a retry's end, `null_cursor: oldest`. The temporary table is dropped when the read
ends, to its end or not."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.cursor.window import Window
from engage_sync.read import duckdb_later, extract
from engage_sync.read.extract import SourceSpec, stream_batches
from engage_sync.read.source_spec import LATER_ROWS
from tests.integration.duckdb_reads import count_reads

T = datetime(2026, 5, 1, 12, 0)
SPEC = SourceSpec(integration="later", table="src", schema=None, query=None,
                  cursor_column="UPDATED_AT", key_columns=("KEY",),
                  columns=("UPDATED_AT", "KEY", "USER", "PAYLOAD", "REGION"),
                  superseded_by=("USER",), partition_column="USER")


def _engine() -> sa.Engine:
    """One in-memory DuckDB connection, kept by the pool: what a read leaves on it is seen."""
    return sa.create_engine("duckdb:///:memory:", poolclass=sa.pool.StaticPool)


def _fill(engine: sa.Engine, seed: int, rows: int, user_is_key: bool = False) -> None:
    rng = random.Random(seed)
    users = rng.choice([1, 3, 40, rows])  # one user, a few with many rows, one row each
    with engine.begin() as conn:
        conn.exec_driver_sql('CREATE TABLE src ("UPDATED_AT" TIMESTAMP, "KEY" VARCHAR, '
                             '"USER" VARCHAR, "PAYLOAD" VARCHAR, "REGION" VARCHAR)')
        conn.execute(sa.text("INSERT INTO src VALUES (:t, :k, :u, :p, :r)"), [
            _row(rng, i, users, user_is_key) for i in range(rows)])


def _row(rng: random.Random, i: int, users: int, user_is_key: bool) -> dict[str, Any]:
    """Cursors tied in whole seconds; a NULL key's row alone at its cursor, as (cursor, key)
    names one row (else two rows' order, and which is latest, is the warehouse's choice).
    `user_is_key`: the key names the user (mapped attributes keyed by their external id), each
    row alone at its cursor, none NULL."""
    null_key = rng.random() < 0.02
    t = T + timedelta(seconds=rng.randrange(60),
                      microseconds=i + 1 if null_key or user_is_key else 0)
    user = None if rng.random() < 0.05 else f"u{rng.randrange(users)}"
    unique = null_key or user_is_key  # NULL cursors would tie
    return {"t": None if rng.random() < 0.03 and not unique else t,
            "k": user if user_is_key else None if null_key else f"k{i:05d}",
            "u": user, "p": f"p{i}", "r": rng.choice([None, "eu", "us"])}


WINDOWS = {
    "everything": Window(start=None, signpost=None),
    "to a signpost": Window(start=None, signpost=T + timedelta(seconds=50)),
    "resumed mid-timestamp": Window(start=(T + timedelta(seconds=10), "k00200"),
                                    signpost=T + timedelta(seconds=55)),
    "a backfill's bounds": Window(start=None, signpost=T + timedelta(days=1),
                                  floor=T + timedelta(seconds=5),
                                  before=T + timedelta(seconds=40)),
    "a partition": Window(start=None, signpost=T + timedelta(days=1), partition=(1, 2)),
    "a retry's rows": Window(start=(T + timedelta(seconds=4), "k00100"),
                             signpost=T + timedelta(days=1),
                             until=(T + timedelta(seconds=45), "k00300")),
}


def _whole(engine: sa.Engine, spec: SourceSpec, window: Window) -> list[tuple[Any, ...]]:
    """The window in one query, LATER_ROWS counted over all of it, as booleans."""
    with engine.connect() as conn:
        query = extract.build_query(spec, extract.resolve_columns(conn, spec), window)
        return [(*r[:-1], r[-1] > 0) for r in conn.execute(query)]


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Slices of 40 rows; counts the queries each read sends to DuckDB."""
    return count_reads(monkeypatch, 40)


def _drops(engine: sa.Engine) -> list[str]:
    """The DROPs of a temporary table sent on the engine's connections (the read is one
    transaction, whose rollback would drop the table too: so the statement is what is seen)."""
    sent: list[str] = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda *args: sent.append(args[2]) if args[2].startswith("DROP") else None)
    return sent


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", list(WINDOWS))
def test_slices_mark_the_rows_the_whole_window_marks(queries: list[int], name: str,
                                                    seed: int) -> None:
    engine = _engine()
    user_is_key = seed >= 8
    _fill(engine, seed, 500, user_is_key)
    spec = replace(SPEC, null_cursor_oldest=seed % 3 == 0,
                   key_columns=("USER",) if user_is_key else SPEC.key_columns,
                   superseded_by=("USER", "REGION") if seed % 2 else SPEC.superseded_by)
    window = WINDOWS[name]
    drops = _drops(engine)
    sliced = [(*r[:-1], r[-1] > 0) for batch in stream_batches(engine, spec, window, 16)
              for r in (tuple(row.values()) for row in batch.to_pylist())]
    assert len(drops) == 1  # its table, at the read's end
    whole = _whole(engine, spec, window)
    assert len(queries) > 3  # it was cut
    assert sliced == whole and len(whole) > 100
    assert any(r[-1] for r in whole) or len({r[2] for r in whole}) == len(whole)


def test_a_read_left_before_its_end_drops_its_table(queries: list[int],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine()
    _fill(engine, 1, 500)
    built: list[str] = []
    build = duckdb_later._build
    monkeypatch.setattr(duckdb_later, "_build",
                        lambda conn, table, *a: (built.append(table), build(conn, table, *a)))
    drops = _drops(engine)
    batches = stream_batches(engine, SPEC, WINDOWS["to a signpost"], 16)
    assert LATER_ROWS in next(batches).schema.names and len(built) == 1
    batches.close()  # a run stopped mid-window
    assert drops == [f"DROP TABLE IF EXISTS {built[0]}"]
    assert len(list(stream_batches(engine, SPEC, WINDOWS["to a signpost"], 16))) > 3
    assert len(set(built)) == 2 and drops[1] == f"DROP TABLE IF EXISTS {built[1]}"


def test_a_small_window_is_one_query_without_the_table(queries: list[int],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine()
    _fill(engine, 2, 30)
    built: list[int] = []
    monkeypatch.setattr(duckdb_later, "_build", lambda *a: built.append(1))
    rows = list(stream_batches(engine, SPEC, WINDOWS["everything"], 16))
    assert sum(b.num_rows for b in rows) == 30 and len(queries) == 1 and built == []


@pytest.mark.parametrize("merged", [False, True], ids=["later rows", "merged rows"])
def test_a_window_whose_users_have_one_row_each_reads_zeros_without_counting(
    queries: list[int], merged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No user with a second row in the window: its table is empty, and the slices read the
    window with every count 0, the same rows as the whole window counted, without a window
    function or a lookup in the table."""
    engine = _engine()
    with engine.begin() as conn:
        conn.exec_driver_sql(
            'CREATE TABLE src AS SELECT TIMESTAMP \'2026-05-01 12:00:00\' + to_seconds(i % 60) '
            'AS "UPDATED_AT", \'k\' || lpad(i::VARCHAR, 5, \'0\') AS "KEY", \'u\' || i AS "USER", '
            '\'p\' || i AS "PAYLOAD", NULL::VARCHAR AS "REGION" FROM range(300) t(i)')
    spec = replace(SPEC, merged=merged)
    read: list[str] = []
    batches = extract._duckdb_batches

    def recorded(conn: Any, part: sa.Select[Any], n: int) -> Any:
        read.append(str(part))
        return batches(conn, part, n)

    monkeypatch.setattr(extract, "_duckdb_batches", recorded)
    window = WINDOWS["everything"]
    rows = [tuple(row.values()) for batch in stream_batches(engine, spec, window, 16)
            for row in batch.to_pylist()]
    counted = 2 if merged else 1
    assert len(queries) > 3 and len(rows) == 300
    assert {r[-counted:] for r in rows} == {(0,) * counted}
    with engine.connect() as conn:
        query = extract.build_query(spec, extract.resolve_columns(conn, spec), window)
        assert rows == [tuple(r) for r in conn.execute(query)]
    assert len(read) > 3 and not any(" OVER " in s or "engage_later_users" in s for s in read)
