"""How many threads SQLite's sorter may add when the field helper writes its records."""

from __future__ import annotations

import pytest

from engage_sync.state.field_store_sql import sorter_threads


@pytest.mark.parametrize("cpus, threads", [(1, 0), (2, 1), (3, 2), (4, 3), (64, 3), (0, 0)])
def test_one_thread_fewer_than_the_cpus_and_at_most_three(cpus: int, threads: int) -> None:
    assert sorter_threads(cpus) == threads
