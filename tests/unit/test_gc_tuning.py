"""The collector's young threshold is raised for a syncing process, once, never lowered, and
left alone when the host turned automatic collection off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from engage_sync.adapters.gc_tuning import GEN0, tune_gc


@pytest.fixture(autouse=True)
def kept() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_the_young_threshold_is_raised_and_the_others_kept() -> None:
    gc.set_threshold(700, 10, 10)
    tune_gc()
    assert gc.get_threshold() == (GEN0, 10, 10)
    tune_gc()
    assert gc.get_threshold() == (GEN0, 10, 10)


def test_a_higher_threshold_or_none_is_left_alone() -> None:
    gc.set_threshold(GEN0 * 4, 5, 5)
    tune_gc()
    assert gc.get_threshold() == (GEN0 * 4, 5, 5)
    gc.set_threshold(0, 10, 10)
    tune_gc()
    assert gc.get_threshold()[0] == 0
