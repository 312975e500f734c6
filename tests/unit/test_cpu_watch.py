"""The pin following load: the decision (pure) and the watcher driven by scripted samples."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from engage_sync.cpu_watch import (
    LET_GO,
    MOVE,
    PATIENCE,
    STAY,
    Look,
    Sample,
    Watcher,
    choose,
    look_between,
    others_share,
)


def _look(busy0: float, busy1: float, ours: float, cpu: int = 0) -> Look:
    return Look(cpu=cpu, seconds=1.0, busy={0: busy0, 1: busy1}, ours=ours)


def test_a_cpu_busy_only_with_the_run_is_not_shared() -> None:
    assert others_share(_look(0.98, 0.9, 0.98)) == 0.0
    assert choose(_look(0.98, 0.0, 0.98), 2) == (STAY, None, 0)  # and the count starts over


def test_the_runs_own_time_elsewhere_never_counts_as_anothers() -> None:
    """The process's CPU time includes threads on other CPUs: more than its CPU's busy time."""
    assert others_share(_look(0.5, 0.9, 1.3)) == 0.0


def test_a_shared_cpu_moves_to_a_freer_one() -> None:
    assert choose(_look(1.0, 0.2, 0.5), 0) == (MOVE, 1, 0)


def test_a_cpu_only_a_little_freer_is_not_worth_moving_to() -> None:
    """Another had 50 % of ours; the other CPU was busy 40 %: within the margin."""
    assert choose(_look(1.0, 0.4, 0.5), 0) == (STAY, None, 1)


def test_shared_with_no_freer_cpu_lets_go_after_patience() -> None:
    shared = 0
    actions = []
    for _ in range(PATIENCE):
        action, _target, shared = choose(_look(1.0, 1.0, 0.5), shared)
        actions.append(action)
    assert actions == [STAY] * (PATIENCE - 1) + [LET_GO]


def test_the_freest_cpu_is_chosen_ties_by_number() -> None:
    look = Look(cpu=2, seconds=0.5, busy={0: 0.1, 1: 0.05, 2: 0.5, 3: 0.05}, ours=0.2)
    assert choose(look, 0) == (MOVE, 1, 0)


def test_a_look_between_two_samples() -> None:
    look = look_between(1, Sample(10.0, {0: 5.0, 1: 7.0}, 3.0), Sample(10.5, {0: 5.4, 1: 7.5}, 3.1))
    assert look.cpu == 1 and look.seconds == pytest.approx(0.5)
    assert look.busy == pytest.approx({0: 0.4, 1: 0.5}) and look.ours == pytest.approx(0.1)


class _Script:
    """Samples where CPU 0 is shared half and half, CPU 1 idle, until the run moves; after
    it the clocks of whichever CPU the run is on show only the run."""

    def __init__(self, moves_allowed: bool = True, shared_everywhere: bool = False) -> None:
        self.at, self.busy, self.ours = 0.0, {0: 0.0, 1: 0.0}, 0.0
        self.cpu = 0
        self.moves: list[int] = []
        self.let_go = threading.Event()
        self.moved = threading.Event()
        self.moves_allowed = moves_allowed
        self.shared_everywhere = shared_everywhere

    def sample(self) -> Sample:
        self.at += 0.5
        self.busy[self.cpu] += 0.5
        self.ours += 0.25 if self.cpu == 0 or self.shared_everywhere else 0.5
        if self.shared_everywhere:
            self.busy[1 - self.cpu] += 0.5
        return Sample(self.at, dict(self.busy), self.ours)

    def move(self, cpu: int) -> bool:
        self.moves.append(cpu)
        if self.moves_allowed:
            self.cpu = cpu
            self.moved.set()
        return self.moves_allowed

    def free(self) -> None:
        self.let_go.set()


def _watch(script: _Script) -> Watcher:
    return Watcher(0, script.sample, script.move, script.free, period=0.01,
                   jitter=lambda: 0.5).start()


def test_the_watcher_moves_a_shared_run_once_and_then_stays() -> None:
    script = _Script()
    watcher = _watch(script)
    try:
        assert script.moved.wait(5)
        for _ in range(20):  # more looks on the new CPU: no more moves
            script.moved.wait(0.01)
    finally:
        watcher.stop()
    assert script.moves == [1] and watcher.cpu == 1 and not script.let_go.is_set()


def test_the_watcher_lets_go_when_every_cpu_is_shared_and_ends() -> None:
    script = _Script(shared_everywhere=True)
    watcher = _watch(script)
    assert script.let_go.wait(5)
    watcher.stop()
    assert script.moves == []


def test_a_move_refused_leaves_the_watcher_on_its_cpu() -> None:
    script = _Script(moves_allowed=False)
    watcher = _watch(script)
    try:
        for _ in range(50):
            if len(script.moves) >= 2:
                break
            script.moved.wait(0.02)
    finally:
        watcher.stop()
    assert script.moves[:2] == [1, 1] and watcher.cpu == 0


def test_a_clock_that_cannot_be_read_ends_the_watching() -> None:
    def samples() -> Iterator[Sample]:
        yield Sample(0.0, {0: 0.0, 1: 0.0}, 0.0)
        raise OSError(5, "Input/output error")

    it = samples()
    watcher = Watcher(0, lambda: next(it), lambda _cpu: True, lambda: None, period=0.01).start()
    watcher._thread.join(5)  # the thread ends by itself
    assert not watcher._thread.is_alive()
