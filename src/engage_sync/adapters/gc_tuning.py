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

`engage-sync run` raises the threshold from its start (`raise_threshold`), before its imports
(Prefect's and ours) and a flow run's creation: with the default one, the ≈ 270,000 objects
they make set off collection after collection of the growing heap; importing what a flow run
needs took 0.92 s against 1.00 (medians of 9, in-process; `benchmarks/start_imports.py`). The
start's garbage is still collected: the young generation's just before the freeze (after the
CLI's, a flow's and the wiring's imports, all 3,106 objects in a cycle were young: ≈ 1 MB,
found in 6 ms, where a full collection took 0.11 s); turning the collector off until the first
sync left ≈ 9 MB of it to collect there, in 0.13 s, or to freeze for good.
"""

from __future__ import annotations

import gc

GEN0 = 50_000


_frozen = False


def tune_gc() -> None:
    """Raise the young generation's threshold to `GEN0` and, the first time, collect the young
    generation and freeze what is alive (idempotent)."""
    global _frozen
    raise_threshold()
    if not _frozen:
        _frozen = True
        if gc.get_freeze_count() == 0:  # the host's own freeze is left as it is
            gc.collect(0)  # the young garbage, not frozen with the rest
            gc.freeze()


def raise_threshold() -> None:
    """The young generation's threshold to `GEN0`, if lower (but 0: the host disabled
    automatic collection; leave it so); the others kept."""
    young, middle, old = gc.get_threshold()
    if 0 < young < GEN0:
        gc.set_threshold(GEN0, middle, old)
