"""A pinned run's CPU watched, so the pin follows load (`cpu_affinity`: the opt-in `auto`).

Runs that cannot see each other's claims (separate containers, a private /tmp) can take the
same CPU when they start together. So every `PERIOD` seconds (give or take `JITTER`, so that
two runs started together do not look at the same moment) the watcher compares how long its
CPU was busy with the CPU time of the run's own process: the rest was another's. When
another's share is over `SHARED`:
- the run moves to the least busy CPU if that one was busy for less than the other's share
  less `MARGIN` (the run would get more of it);
- when no CPU is, `PATIENCE` looks in a row, the run lets go of the pin and the watcher ends
  (on a host busier than its cores, the kernel shares them more fairly than pins do).

Invariants:
- `choose` is pure: a look in, an action out;
- the process's CPU time counts as the run's, including its threads on other CPUs (Prefect's
  own): that can hide another's share, not invent one; busy time is user, nice and system
  time only (`cpu_affinity.busy_ticks`), so interrupts a kernel accounts apart from the
  run's own time do not read as another's. A child process's work does (its field helper is
  placed off the run's CPU; once the run waits for it, `cpu_affinity.release_child` gives it
  the run's CPU too and stops the watcher first);
- a run that lets go of its pin is not pinned again;
- the watcher acts only through the callables it is given, from its own thread, and ends at
  `stop` or when it lets go; a CPU whose busy time cannot be read ends it (the pin stays).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PERIOD = 0.5  # seconds between looks
JITTER = 0.2  # each look's period varies by up to this share
SHARED = 0.3  # another's share of the run's CPU over a look above which the run acts
MARGIN = 0.15  # how much less busy a CPU must be than the other's share to move there
CONFIRM = (0.1, 1.0)  # a move's second look lasts a share of a period drawn from this range
PATIENCE = 3  # shared looks in a row with no freer CPU before the run lets go
STAY, MOVE, LET_GO = "stay", "move", "let go"
log = logging.getLogger("engage_sync.cpu")
_RANDOM = random.Random()  # ours: the global generator is the application's to seed and draw


@dataclass(frozen=True)
class Look:
    """What the watcher saw over one period."""

    cpu: int  # the run's CPU
    seconds: float  # the look's length
    busy: Mapping[int, float]  # seconds each CPU the run may use was busy, all processes
    ours: float  # CPU seconds of the run's process


def others_share(look: Look) -> float:
    """The share of the look that the run's CPU was busy with another process's work."""
    return max(0.0, look.busy.get(look.cpu, 0.0) - look.ours) / look.seconds


def choose(look: Look, shared_looks: int) -> tuple[str, int | None, int]:
    """(action, the CPU to move to or None, shared looks in a row including this one)."""
    other = others_share(look)
    if other <= SHARED:
        return STAY, None, 0
    freest = min((cpu for cpu in look.busy if cpu != look.cpu),
                 key=lambda cpu: (look.busy[cpu], cpu), default=None)
    if freest is not None and look.busy[freest] / look.seconds < other - MARGIN:
        return MOVE, freest, 0
    if shared_looks + 1 >= PATIENCE:
        return LET_GO, None, shared_looks + 1
    return STAY, None, shared_looks + 1


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic seconds
    busy: Mapping[int, float]  # each CPU's busy seconds so far
    ours: float  # the process's CPU seconds so far


class Watcher:
    """The watching thread. `sample()` reads the clocks; `move(cpu)` moves the run there and
    returns whether it did; `let_go()` unpins it."""

    def __init__(self, cpu: int, sample: Callable[[], Sample], move: Callable[[int], bool],
                 let_go: Callable[[], None], period: float = PERIOD,
                 jitter: Callable[[], float] = _RANDOM.random) -> None:
        self.cpu = cpu
        self._sample, self._move, self._let_go = sample, move, let_go
        self._period, self._jitter = period, jitter
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="engage-sync-cpu-watch",
                                        daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the watching; returns once the thread has (a move under way finishes)."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _wait(self) -> bool:
        """Waits one period; False once stopped."""
        return not self._stopped.wait(self._period * (1 + JITTER * (2 * self._jitter() - 1)))

    def _confirm(self, after: Sample) -> tuple[Look, tuple[str, int | None, int]]:
        """A move decided is looked at again over a random time (two runs that share a CPU
        both decide to leave it; the one that confirms later sees the other gone, so the
        longer the draw's range, the likelier they confirm apart)."""
        low, high = CONFIRM
        if self._stopped.wait(self._period * (low + (high - low) * self._jitter())):
            return look_between(self.cpu, after, after), (STAY, None, 0)
        look = look_between(self.cpu, after, self._sample())
        return look, choose(look, 0)

    def _watch(self) -> None:
        try:
            before = self._sample()
            shared = 0
            while self._wait():
                after = self._sample()
                look = look_between(self.cpu, before, after)
                action, target, shared = choose(look, shared)
                if action == MOVE:
                    look, (action, target, _) = self._confirm(after)
                if action == MOVE and target is not None and self._move(target):
                    log.info("the run moved from CPU %d to CPU %d: another process had %d %% "
                             "of it", self.cpu, target, round(100 * others_share(look)))
                    self.cpu = target
                elif action == LET_GO:
                    log.info("the run lets go of CPU %d: another process had %d %% of it and "
                             "no CPU was freer", self.cpu, round(100 * others_share(look)))
                    self._let_go()
                    return
                before = after
        except (OSError, ValueError) as exc:
            log.info("the run's CPU can no longer be watched (%s); it stays on CPU %d",
                     getattr(exc, "strerror", None) or exc, self.cpu)


def look_between(cpu: int, before: Sample, after: Sample) -> Look:
    """The look from two samples (a clock that went back counts as nothing)."""
    return Look(cpu=cpu, seconds=max(after.at - before.at, 1e-9),
                busy={c: max(0.0, after.busy[c] - before.busy.get(c, after.busy[c]))
                      for c in after.busy},
                ours=max(0.0, after.ours - before.ours))


def sampler(cpus: frozenset[int], busy_ticks: Callable[[], Mapping[int, int]],
            ticks_per_second: float) -> Callable[[], Sample]:
    """A `Sample` reader over `cpus`, from per-CPU busy ticks and the process's CPU time."""
    def sample() -> Sample:
        ticks = busy_ticks()
        return Sample(at=time.monotonic(), ours=time.process_time(),
                      busy={c: ticks.get(c, 0) / ticks_per_second for c in cpus})
    return sample
