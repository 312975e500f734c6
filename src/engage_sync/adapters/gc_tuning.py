"""CPython's cyclic garbage collector tuned for a process that syncs.

A run allocates a few containers a row (the transform's dicts and tuples, the packer's lists),
nearly all freed at once by reference counting and almost none in a cycle. With CPython's
default threshold (a young collection every 700 net allocations) transforming 1,000,000 rows
ran 2,370 young, 215 middle and 16-20 full collections: 30-35 % of the transform's CPU, as each
full one walks every object the imports made (≈ 110,000; ≈ 190,000 with Prefect). With a young
collection every `GEN0` net allocations it was 2 collections and 0.02 s (`benchmarks/README.md`).

The objects alive at the first sync (the imports', Prefect's) are then frozen (`gc.freeze`): no
later collection walks them. The interpreter's last full collection at exit walked them all
(0.05 s): with it and the warehouse's connections closing, a 1M-event run took 0.20-0.25 s to
end after its status record against 0.06-0.08 frozen, and its stream took 0.1-0.3 s less.

Invariants: cycles made after the freeze are still collected (at most about `GEN0` objects wait
for it); what was frozen is never collected: in a process that runs many syncs (a served
deployment, a Dask worker, the status server) a cycle the first sync's own objects leave (its
caller's state store, say) stays for the process's life, with what it holds, once (≈ 0.1 MB
for a flow's store); the changes are process-wide and made once: the threshold only raised,
never lowered (a threshold the host set higher stays), nothing frozen when the host froze
objects itself, and never again after the first freeze (`_frozen`: not even when every frozen
object has been freed since, as the freeze count then reads 0).

A run's start, before its first sync (the imports, Prefect's and ours, and a flow run's
creation), may run with the collector off (`pause`): of the ≈ 190,000 objects it makes and keeps
for the process's life, each full collection the growing heap set off walked them all, and a
served flow run's first request came 0.15 s later (1.69 s against 1.54, medians of 3,
`benchmarks/README.md`). The first `tune_gc` collects the garbage of that start once, so none
of it is frozen, and turns the collector back on; `resume` turns it on if no sync came (a run
that failed before it). A process that never called `pause` is left as it was (a served
deployment's: it may never sync in its own process).
"""

from __future__ import annotations

import gc

GEN0 = 50_000


_frozen = False
_paused = False


def tune_gc() -> None:
    """Raise the young generation's threshold to `GEN0` and, the first time, freeze what is
    alive (after collecting a paused start's garbage); the collector on again if `pause` had
    turned it off (idempotent)."""
    global _frozen
    young, middle, old = gc.get_threshold()
    if 0 < young < GEN0:  # 0: the host disabled automatic collection; leave it so
        gc.set_threshold(GEN0, middle, old)
    if not _frozen:
        _frozen = True
        if _paused:
            gc.collect()  # the paused start's garbage: none of it frozen for good
        if gc.get_freeze_count() == 0:  # the host's own freeze is left as it is
            gc.freeze()
    resume()


def pause() -> None:
    """The collector off until the first `tune_gc` or `resume` (a run's start); nothing
    when it is off already (the host's choice) or a sync came before."""
    global _paused
    if gc.isenabled() and not _frozen:
        gc.disable()
        _paused = True


def resume() -> None:
    """The collector on again if `pause` turned it off (idempotent)."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()
