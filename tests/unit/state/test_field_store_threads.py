"""How many threads SQLite's sorter may add when the field helper writes its records, on the CPUs
it may keep busy (its affinity, fewer under a cgroup CPU quota)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engage_sync.state.field_store_sql import sorter_threads, usable_cpus


@pytest.mark.parametrize("cpus, threads", [(1, 0), (2, 1), (3, 2), (4, 3), (64, 3), (0, 0)])
def test_one_thread_fewer_than_the_cpus_and_at_most_three(cpus: int, threads: int) -> None:
    assert sorter_threads(cpus) == threads


@pytest.mark.parametrize("text, cpus", [
    ("max 100000\n", 4),  # no quota
    ("100000 100000\n", 1),  # one CPU's worth
    ("150000 100000\n", 2),  # one and a half: rounded up
    ("800000 100000\n", 4),  # more than the affinity allows
    ("garbage\n", 4), ("", 4),
])
def test_a_cgroup_quota_lowers_the_cpus_the_sort_counts_on(
        tmp_path: Path, text: str, cpus: int) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(text)
    assert usable_cpus(4, str(cpu_max)) == cpus


def test_without_a_cgroup_file_the_affinity_counts(tmp_path: Path) -> None:
    assert usable_cpus(3, str(tmp_path / "absent")) == 3


def test_by_default_the_process_affinity_counts(tmp_path: Path) -> None:
    import os

    assert usable_cpus(cpu_max=str(tmp_path / "absent")) == len(os.sched_getaffinity(0))
