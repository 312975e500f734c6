"""CPython's cyclic garbage collector tuned for a process that syncs: opt-in
(ENGAGE_SYNC_TUNE_GC=on; `off`, the default, leaves the collector as the host set it).

Why: a run allocates a few containers a row, nearly all freed at once by reference counting
and almost none in a cycle, so the default young threshold spends a share of the transform's
CPU walking the imports' objects (figures: benchmarks/README.md). It is not the default
because the collector is process-wide: a host that embeds engage-sync owns its settings.

With the setting on, `engage-sync run` raises the young threshold from its start
(`raise_threshold`, before its imports), and the first sync collects the young generation
and freezes what is alive (`tune_gc`): later collections never walk the imports' objects.

Invariants: unset, blank, `off` or a value not understood changes nothing (no set_threshold,
no freeze, no disable; a value not understood is logged, once: it is read at a sync's start,
before a failure can be recorded); cycles made after the freeze are still collected; what
was frozen is never collected (in a process that runs many syncs, a cycle the first sync's
objects leave stays for the process's life); the changes are process-wide and made once:
the threshold only raised, never lowered (a threshold the host set higher, or 0, stays),
nothing frozen when the host froze objects itself, and never again after the first freeze
(`_frozen`).
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Mapping

ENV = "ENGAGE_SYNC_TUNE_GC"
GEN0 = 50_000
ON, OFF = ("on", "true", "1", "yes"), ("off", "false", "0", "no", "")
log = logging.getLogger("engage_sync.gc")

_frozen = False
_warned = False


def wanted(environ: Mapping[str, str]) -> bool:
    """ENGAGE_SYNC_TUNE_GC read: True for `on` (or true, 1, yes), False for `off` (or false, 0,
    no, unset); another value is False, with a warning the first time."""
    global _warned
    text = environ.get(ENV, "").strip().lower()
    if text in ON:
        return True
    if text not in OFF and not _warned:
        _warned = True
        log.warning("%s=%s is not `on` or `off`: the garbage collector is left alone", ENV,
                    environ.get(ENV))
    return False


def tune_gc(environ: Mapping[str, str] = os.environ) -> None:
    """With the setting on: raise the young generation's threshold to `GEN0` and, the first
    time, collect the young generation and freeze what is alive (idempotent)."""
    global _frozen
    if not wanted(environ):
        return
    raise_threshold(environ)
    if not _frozen:
        _frozen = True
        if gc.get_freeze_count() == 0:  # the host's own freeze is left as it is
            gc.collect(0)  # the young garbage, not frozen with the rest
            gc.freeze()


def raise_threshold(environ: Mapping[str, str] = os.environ) -> None:
    """With the setting on, the young generation's threshold to `GEN0`, if lower (but 0: the
    host disabled automatic collection; leave it so); the others kept."""
    if not wanted(environ):
        return
    young, middle, old = gc.get_threshold()
    if 0 < young < GEN0:
        gc.set_threshold(GEN0, middle, old)
