"""A run's start: importing what `engage-sync run` needs (a flow run's modules, or --no-prefect's)
under CPython's collector as the process has it, in a fresh interpreter each time, timed inside
it (no interpreter start or exit), then the first sync's `tune_gc` (which freezes what is alive).

Variants (alternating, `--runs` each): `default` (the collector's thresholds as CPython starts:
700, 10, 10); `raised` (`gc_tuning.raise_threshold()` first, as `engage-sync run` now does);
`paused` (the collector off until the first sync, which collects the start's garbage first: the
variant tried and not kept); `raised-middle` (young 50,000 and middle 50: not kept either).
Also the start's cyclic garbage: what a collection frees after imports made with the collector
off (tracked containers only).

    .venv/bin/python benchmarks/start_imports.py [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

MODULES = {"flow run": "engage_sync.adapters.flows", "--no-prefect": "engage_sync.adapters.wiring"}
VARIANTS = {
    "default": ("", ""),
    "raised": ("gc_tuning.raise_threshold()", ""),
    "paused": ("gc.disable()", "gc.collect(); gc.enable()"),
    "raised-middle": ("gc.set_threshold(gc_tuning.GEN0, 50, gc.get_threshold()[2])", ""),
}
CHILD = """
import time
t0 = time.perf_counter()
import gc
from engage_sync.adapters import gc_tuning
{before}
import {module}
t1 = time.perf_counter()
{after}
gc_tuning.tune_gc()
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""
GARBAGE = """
import gc, sys
gc.disable()
import {module}
def size():
    objs = gc.get_objects()
    return len(objs), sum(sys.getsizeof(o) for o in objs)
(n0, b0), freed = size(), gc.collect()
n1, b1 = size()
print(n0, n1, (b0 - b1) / 1e6)
"""


def timed(module: str, before: str, after: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(
        module=module, before=before, after=after)], capture_output=True, text=True, check=True)
    imports, sync = map(float, out.stdout.split())
    return imports, sync


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=9)
    args = p.parse_args()
    for label, module in MODULES.items():
        seen: dict[str, list[tuple[float, float]]] = {k: [] for k in VARIANTS}
        for _ in range(args.runs):
            for name, (before, after) in VARIANTS.items():
                seen[name].append(timed(module, before, after))
        for name, runs in seen.items():
            imports = statistics.median(r[0] for r in runs)
            sync = statistics.median(r[1] for r in runs)
            total = statistics.median(r[0] + r[1] for r in runs)
            print(json.dumps({"start": label, "variant": name, "imports_s": round(imports, 3),
                              "first_tune_gc_s": round(sync, 3), "sum_s": round(total, 3)}))
        out = subprocess.run([sys.executable, "-c", GARBAGE.format(module=module)],
                             capture_output=True, text=True, check=True).stdout.split()
        print(json.dumps({"start": label, "tracked_objects_with_gc_off": int(out[0]),
                          "after_one_collection": int(out[1]),
                          "freed_mb_containers": round(float(out[2]), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
