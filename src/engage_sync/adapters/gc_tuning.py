"""CPython's cyclic garbage collector tuned for a process that syncs.

A run allocates a few containers a row (the transform's dicts and tuples, the packer's lists),
nearly all freed at once by reference counting and almost none in a cycle. With CPython's
default threshold (a young collection every 700 net allocations) transforming 1,000,000 rows
ran 2,370 young, 215 middle and 16-20 full collections: 30-35 % of the transform's CPU, as each
full one walks every object the imports made (≈ 110,000; ≈ 190,000 with Prefect). With a young
collection every `GEN0` net allocations it was 2 collections and 0.02 s (`benchmarks/README.md`).

Invariants: cycles are still collected (at most about `GEN0` objects wait for it); the change is
process-wide and made once, only raised, never lowered: a threshold the host set higher stays.
"""

from __future__ import annotations

import gc

GEN0 = 50_000


def tune_gc() -> None:
    """Raise the young generation's threshold to `GEN0` (idempotent)."""
    young, middle, old = gc.get_threshold()
    if 0 < young < GEN0:  # 0: the host disabled automatic collection; leave it so
        gc.set_threshold(GEN0, middle, old)
