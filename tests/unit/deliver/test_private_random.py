"""The random draws engage-sync makes in its own threads (a retry's jitter in a send thread,
the CPU pin's tie-break and its watcher's period) come from generators of its own: the global
`random` generator is the application's to seed and draw, and a draw from another thread moves
it under the application (Hypothesis, for one, warns when it moves during a draw). Pure."""

from __future__ import annotations

import inspect
import random

from tenacity import RetryCallState, Retrying

from engage_sync import cpu_affinity, cpu_watch
from engage_sync.deliver.retry_policy import Jitter


def _unmoved(draw: object) -> None:
    random.seed(42)
    state = random.getstate()
    assert callable(draw)
    for _ in range(100):
        draw()
    assert random.getstate() == state


def test_a_retrys_jitter_leaves_the_global_generator_alone() -> None:
    jitter = Jitter(2.0)
    retry = RetryCallState(retry_object=Retrying(), fn=None, args=(), kwargs={})
    waits = [jitter(retry) for _ in range(200)]
    assert all(0 <= w <= 2.0 for w in waits) and len(set(waits)) > 100  # drawn, and spread
    _unmoved(lambda: jitter(retry))


def test_the_cpu_pins_draws_leave_the_global_generator_alone() -> None:
    # the defaults a run uses: the tie-break of `auto` and the watcher's jitter
    tiebreak = inspect.signature(cpu_affinity.candidates).parameters["tiebreak"].default
    jitter = inspect.signature(cpu_watch.Watcher).parameters["jitter"].default
    assert tiebreak is not random.random and jitter is not random.random
    _unmoved(tiebreak)
    _unmoved(jitter)
