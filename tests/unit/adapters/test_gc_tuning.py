"""ENGAGE_SYNC_TUNE_GC: off by default, and then nothing changes. On, the collector's young
threshold is raised for a syncing process, once, never lowered, and left alone when the host
turned automatic collection off; what is alive at the first sync is frozen, once, and not
when the host froze objects itself; later cycles are still collected. A run's start raises
the threshold alone (`raise_threshold`): nothing frozen yet."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from engage_sync.adapters import gc_tuning
from engage_sync.adapters.gc_tuning import GEN0

ON = {"ENGAGE_SYNC_TUNE_GC": "on"}


def tune_gc() -> None:
    gc_tuning.tune_gc(ON)


@pytest.fixture(autouse=True)
def kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts as a process before its first sync: nothing frozen."""
    before = gc.get_threshold()
    gc.unfreeze()
    monkeypatch.setattr(gc_tuning, "_frozen", False)
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def _cycle() -> weakref.ref[Node]:
    """Two nodes in a cycle, nothing else holding them: a weak reference to one."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def walked(obj: object) -> bool:
    """Whether collections walk `obj` (a tracked object not frozen). The freeze count is no
    measure: it falls as frozen objects are freed, by any thread."""
    return any(o is obj for o in gc.get_objects())


def test_what_is_alive_at_the_first_sync_is_frozen_once() -> None:
    alive = [[k] for k in range(10)]
    assert walked(alive)
    tune_gc()
    assert gc.get_freeze_count() > 0 and not walked(alive)
    more = [[k] for k in range(10)]  # made after: not frozen by a second sync
    tune_gc()
    assert walked(more)
    gc.unfreeze()  # as if every frozen object had been freed: the count reads 0 again
    tune_gc()
    assert gc.get_freeze_count() == 0 and walked(more)


def test_a_cycle_made_after_the_freeze_is_still_collected() -> None:
    tune_gc()
    gone = _cycle()
    gc.collect()
    assert gone() is None


def test_a_host_that_froze_objects_itself_is_left_alone() -> None:
    gc.freeze()
    made_after = [[k] for k in range(10)]
    tune_gc()
    assert walked(made_after)


def test_the_young_threshold_is_raised_and_the_others_kept() -> None:
    gc.set_threshold(700, 10, 10)
    tune_gc()
    assert gc.get_threshold() == (GEN0, 10, 10)
    tune_gc()
    assert gc.get_threshold() == (GEN0, 10, 10)


def test_a_run_s_start_raises_the_threshold_and_freezes_nothing() -> None:
    gc.set_threshold(700, 10, 10)
    alive = [[k] for k in range(10)]
    gc_tuning.raise_threshold(ON)
    assert gc.get_threshold() == (GEN0, 10, 10)
    assert gc.get_freeze_count() == 0 and walked(alive)
    tune_gc()  # the first sync then freezes what is alive
    assert not walked(alive)


def test_a_higher_threshold_or_none_is_left_alone() -> None:
    gc.set_threshold(GEN0 * 4, 5, 5)
    tune_gc()
    assert gc.get_threshold() == (GEN0 * 4, 5, 5)
    gc.set_threshold(0, 10, 10)
    tune_gc()
    assert gc.get_threshold()[0] == 0


def test_young_garbage_at_the_first_sync_is_collected_not_frozen() -> None:
    """A start with the threshold raised leaves its last cycles young: the first sync collects
    them before it freezes what is alive."""
    gc.set_threshold(GEN0, 10, 10)
    gone = _cycle()
    tune_gc()
    assert gone() is None


@pytest.mark.parametrize("environ", [{}, {"ENGAGE_SYNC_TUNE_GC": " "},
                                     {"ENGAGE_SYNC_TUNE_GC": "OFF"}])
def test_off_or_unset_leaves_the_collector_alone(environ: dict[str, str]) -> None:
    gc.set_threshold(700, 10, 10)
    alive = [[k] for k in range(10)]
    gc_tuning.raise_threshold(environ)
    gc_tuning.tune_gc(environ)
    assert gc.get_threshold() == (700, 10, 10) and gc.isenabled()
    assert gc.get_freeze_count() == 0 and walked(alive)


def test_a_setting_not_understood_is_said_once_and_changes_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(gc_tuning, "_warned", False)
    gc.set_threshold(700, 10, 10)
    bad = {"ENGAGE_SYNC_TUNE_GC": "fast"}
    gc_tuning.raise_threshold(bad)
    gc_tuning.tune_gc(bad)
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
    said = [r.getMessage() for r in caplog.records if r.name == "engage_sync.gc"]
    assert said == ["ENGAGE_SYNC_TUNE_GC=fast is not `on` or `off`: the garbage collector is "
                    "left alone"]
