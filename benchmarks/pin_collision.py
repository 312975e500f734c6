"""Runs that cannot see each other's CPU claims, started together: each of `--runs` processes
holds `run_pin("auto", <its own temporary folder>)` (as runs in separate containers would)
around the same CPU-bound loop, and prints its wall time and what its pin did. `--watch off`
disables the watcher (the pin is held where it started, as before the pin followed load);
`--pin off` runs them unpinned.

    .venv/bin/python benchmarks/pin_collision.py [--runs 2] [--sittings 2]
        [--loops 60000000] [--watch on|off] [--pin auto|off]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time


def child(loops: int, watch: bool, pin: str) -> None:
    """One run: the loop inside the pin; its log lines and its wall on standard output."""
    logging.basicConfig(level=logging.INFO, format="  %(message)s", stream=sys.stdout)
    from engage_sync import cpu_watch
    from engage_sync.cpu_affinity import run_pin

    if not watch:
        cpu_watch.Watcher.start = lambda self: self  # type: ignore[method-assign]
    started = time.perf_counter()
    with run_pin(None if pin == "off" else "auto", tempfile.mkdtemp()) as cpu:
        total = 0
        for i in range(loops):
            total += i * i % 7
    print(f"  started on CPU {cpu}, wall {time.perf_counter() - started:.2f} s", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--sittings", type=int, default=2)
    p.add_argument("--loops", type=int, default=60_000_000)
    p.add_argument("--watch", choices=("on", "off"), default="on")
    p.add_argument("--pin", choices=("auto", "off"), default="auto")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.loops, args.watch == "on", args.pin)
        return
    for sitting in range(args.sittings):
        procs = [subprocess.Popen(
            [sys.executable, __file__, "--child", "--loops", str(args.loops), "--watch",
             args.watch, "--pin", args.pin], stdout=subprocess.PIPE, text=True)
            for _ in range(args.runs)]
        for k, proc in enumerate(procs):
            out, _ = proc.communicate()
            print(f"sitting {sitting + 1}, run {k + 1} (pin {args.pin}, watch {args.watch}):")
            print(out.rstrip())


if __name__ == "__main__":
    main()
