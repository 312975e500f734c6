"""Partitioned runs without I/O: which partition a user is in (stable across versions and
processes), where the cursor may move when partitions settle at different speeds
(`progress.partitions_settled`), how many partitions a resumed run keeps, and the config
rules (kinds that cannot be partitioned; a local budget across processes)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engage_sync.config.files import parse_integration
from engage_sync.config.partition_names import parse as parse_partition
from engage_sync.cursor.progress import PartitionProgress, may_move_cursor, partitions_settled
from engage_sync.errors import ConfigError
from engage_sync.partitions.coordinator import partitions_to_run
from engage_sync.partitions.scope import PartitionScope
from engage_sync.read.key_digest import python_bucket

# --- which partition -----------------------------------------------------------------------

# int(first 8 hex digits of md5(text)) mod N. These figures must never change: a partition
# killed by one version and resumed by the next must read the same users.
KNOWN = [("u00001", 4, 1), ("u00001", 7, 6), ("u00001", 2**32, 1927589229),
         ("u00002", 4, 2), ("alice", 7, 3), ("", 4, 1), ("ü-1", 7, 3)]


@pytest.mark.parametrize(("key", "count", "partition"), KNOWN)
def test_a_users_partition_is_fixed_forever(key: str, count: int, partition: int) -> None:
    assert python_bucket(key, count) == partition


def test_a_null_key_is_read_by_the_partition_of_the_empty_text() -> None:
    assert python_bucket(None, 4) == python_bucket("", 4)


@pytest.mark.parametrize("count", [2, 4, 8])
def test_users_spread_evenly_over_the_partitions(count: int) -> None:
    spread = Counter(python_bucket(f"user-{n}", count) for n in range(20_000))
    assert set(spread) == set(range(count))
    assert max(spread.values()) < 1.1 * 20_000 / count


@given(st.text(max_size=40), st.integers(min_value=1, max_value=64))
def test_every_key_is_in_exactly_one_partition(key: str, count: int) -> None:
    assert 0 <= python_bucket(key, count) < count


def test_a_partitions_run_name_carries_its_index_and_count() -> None:
    name = PartitionScope("parent", 2, 4).run_name("users")
    assert name == "users#2/4" and parse_partition(name) == (2, 4)
    assert parse_partition("users") is None


# --- where the cursor may move ---------------------------------------------------------------

def p(position: int | None, done: bool = False) -> PartitionProgress:
    return PartitionProgress(None if position is None else (position, "k"), done)


@pytest.mark.parametrize(("parts", "settled"), [
    ([p(5), p(9), p(7)], 5),  # the slowest open partition
    ([p(5, done=True), p(9), p(7)], 7),  # a finished partition holds nothing back
    ([p(5, done=True), p(9, done=True)], 9),  # all finished: the window's last row
    ([p(None), p(9)], None),  # one has settled nothing yet (from the beginning)
    ([p(None, done=True), p(4, done=True)], 4),  # a finished partition with no rows
    ([p(None, done=True)], None),
    ([], None),
])
def test_the_cursor_may_move_to_where_every_partition_settled(
        parts: list[PartitionProgress], settled: int | None) -> None:
    result = partitions_settled(parts)
    assert (None if result is None else result[0]) == settled


@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=60),
       st.lists(st.integers(0, 60), min_size=4, max_size=4))
def test_the_cursor_never_passes_an_unsettled_row(rows: list[tuple[int, bool]],
                                                  prefixes: list[int]) -> None:
    """Rows 0..n in source order, each in a partition; each partition settled a prefix of its
    own rows (a random length). Every row at or before the settled point is settled."""
    positions: dict[int, list[int]] = {k: [] for k in range(4)}
    for n, (k, _) in enumerate(rows):
        positions[k].append(n)
    settled: set[int] = set()
    parts = []
    for k in range(4):
        mine = positions[k][:prefixes[k]]
        settled.update(mine)
        done = prefixes[k] >= len(positions[k])
        parts.append(PartitionProgress((mine[-1],) if mine else None, done))
    point = partitions_settled(parts)
    if point is not None:
        assert all(n in settled for n in range(len(rows)) if n <= point[0])


def test_one_partition_never_moves_the_integration_cursor_itself() -> None:
    assert may_move_cursor("incremental", None, (1,)) is True
    assert may_move_cursor("incremental", None, (1,), partition=True) is False


# --- how many partitions a start runs --------------------------------------------------------

@pytest.mark.parametrize(("asked", "children", "touched", "count"), [
    (4, [], False, 4),  # a new run (or one that did nothing yet): as asked
    (1, ["users#0/4", "users#2/4"], False, 4),  # an unfinished partitioned run keeps its 4
    (8, ["users#1/4"], False, 4),
    (4, [], True, 1),  # an unfinished run that ran unpartitioned stays so
])
def test_an_unfinished_run_keeps_its_partitions(asked: int, children: list[str],
                                                touched: bool, count: int) -> None:
    assert partitions_to_run(asked, children, touched) == count


# --- config -----------------------------------------------------------------------------------

def body(kind: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"kind": kind, "source": {"table": "t"}}
    if kind in ("events", "purchases"):
        base["row_key"] = ["EVENT_ID"]
    return {**base, **extra}


@pytest.mark.parametrize("kind", ["attributes", "events", "purchases"])
def test_track_kinds_may_be_partitioned(kind: str) -> None:
    assert parse_integration(body(kind, partitions=4), file=f"{kind}.yaml").partitions == 4


@pytest.mark.parametrize("kind", ["deletes", "merges"])
def test_identity_kinds_and_deletes_cannot_be_partitioned(kind: str) -> None:
    extra: dict[str, Any] = {"partitions": 4}
    if kind == "merges":
        extra["merges"] = {"merge": {"external_id": "OLD"}, "keep": {"external_id": "NEW"}}
    with pytest.raises(ConfigError) as err:
        parse_integration(body(kind, **extra), file=f"{kind}.yaml")
    assert "'partitions' (4)" in str(err.value) and "cannot be partitioned" in str(err.value)


def test_partitions_on_dask_with_a_local_budget_are_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        parse_integration(body("attributes", partitions=4, task_runner={"type": "dask"}),
                          file="users.yaml")
    assert "'service.rate_budget.backend' is local" in str(err.value)
    ok = parse_integration(body("attributes", partitions=4, task_runner={"type": "dask"},
                                service={"rate_budget": {"backend": "redis",
                                                         "url": "${BUDGET_URL}"}}),
                           file="users.yaml")
    assert ok.task_runner.type == "dask"


def test_a_partition_job_never_shows_the_state_databases_password() -> None:
    from pydantic import SecretStr

    from engage_sync.partitions.coordinator import PartitionJob

    job = PartitionJob("/cfg/users.yaml", 1, 4, "parent", "incremental", None, None, False,
                       SecretStr("postgresql://sync:hunter2@db/state"))
    assert "hunter2" not in repr(job) and "hunter2" not in str(job)
    assert job.state_url is not None and "hunter2" in job.state_url.get_secret_value()
