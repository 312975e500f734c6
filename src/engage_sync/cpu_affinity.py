"""A run's process kept on one CPU, its field helper on the others (opt-in: ENGAGE_SYNC_PIN_CPU).

Why: the run's threads (the one that reads and packs, the send threads, the helper's writer)
share one interpreter lock, so together they use at most about one core of Python. Left free,
the kernel spreads them over the cores, and every hand-over of the lock between two cores
costs a cross-core wake-up and cold caches. On the 2-core benchmark machine, keeping the
process on one CPU (and the field helper and the sink on the other) took a first diffed run of
1,000,000 attributes from 50,288 to 58,320 rows/s and its CPU from 24.9 to 20.1 s, and
1,000,000 events from 36,011-37,354 to 44,770-45,410 rows/s (benchmarks/README.md, "One core
for the run's process").

It is opt-in because a pin cannot follow load: on a host shared with other busy processes the
chosen CPU may become the busiest. Use it where a run has its worker (a container or a
machine) to itself. Runs of one host that pin with `auto` never share a CPU: each claims its
CPU with a lock file in the temporary directory, held until it exits.

Invariants:
- Linux only (`os.sched_setaffinity`); elsewhere any value but `off` is a ConfigError;
- pins the calling thread: call it before the run starts threads, which inherit the pin;
- never widens what the host allowed: the CPU is one of the calling thread's allowed CPUs;
- `auto` takes only a CPU no other engage-sync process of the host has claimed (a `flock`,
  released by the kernel when the process ends, even killed); with none left it does not pin;
- a child process placed with `place_child` runs on the CPUs allowed before the pin, less the
  pinned one (all of them if there is no other); without a pin it is left as it is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from engage_sync.errors import ConfigError

ENV = "ENGAGE_SYNC_PIN_CPU"
SAMPLE_SECONDS = 0.05  # `auto` compares the allowed CPUs' busy time over this long
log = logging.getLogger("engage_sync.cpu")

CLAIM = "engage-sync-cpu-{}.lock"  # `auto`'s claim on a CPU, in the temporary directory
_pinned: tuple[int, frozenset[int]] | None = None  # (the CPU, the CPUs allowed before)
_claim: IO[bytes] | None = None  # held open for the process's life


def candidates(text: str, allowed: frozenset[int], busy: Callable[[], Mapping[int, int]]
               ) -> list[int] | None:
    """The CPUs ENGAGE_SYNC_PIN_CPU's `text` lets the run take, in order of preference, or
    None (`off` or empty): a number names one of `allowed`; `auto` gives every allowed CPU,
    the least busy first (`busy()` read twice, `SAMPLE_SECONDS` apart; ties by number).
    Raises ConfigError naming the setting."""
    text = text.strip().lower()
    if text in ("", "off"):
        return None
    if text == "auto":
        before = busy()
        time.sleep(SAMPLE_SECONDS)
        after = busy()
        return sorted(allowed, key=lambda cpu: (after.get(cpu, 0) - before.get(cpu, 0), cpu))
    if not text.isdigit():
        raise ConfigError("must be `off`, `auto` or a CPU number", key=ENV)
    if int(text) not in allowed:
        raise ConfigError(f"CPU {int(text)} is not one this process may run on "
                          f"({', '.join(map(str, sorted(allowed)))})", key=ENV)
    return [int(text)]


def claim_cpu(order: Sequence[int], folder: str) -> tuple[int, IO[bytes]] | None:
    """The first CPU of `order` that no other engage-sync process of this host holds, and
    the claim: an exclusive lock on `folder`/engage-sync-cpu-N.lock, held while the file
    stays open (so until the process ends, however it ends). None when all are held."""
    import fcntl  # POSIX only: imported where used, so the module loads everywhere

    for cpu in order:
        claim = open(os.path.join(folder, CLAIM.format(cpu)), "ab")  # noqa: SIM115 - kept
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            claim.close()
            continue
        return cpu, claim
    return None


def busy_ticks(stat: str = "/proc/stat") -> dict[int, int]:
    """Each CPU's busy clock ticks so far (all but idle and I/O wait), from /proc/stat."""
    out: dict[int, int] = {}
    with open(stat, encoding="ascii") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                ticks = [int(x) for x in fields]
                out[int(name[3:])] = sum(ticks) - sum(ticks[3:5])
    return out


def pin_from_env(environ: Mapping[str, str], folder: str | None = None) -> int | None:
    """Pin the calling thread (and the threads it starts after) to the CPU that
    ENGAGE_SYNC_PIN_CPU names; returns it, or None when unset or `off`, or when `auto` finds
    every allowed CPU held by another engage-sync run of this host (claims in `folder`,
    default the temporary directory; then the run is not pinned, and says so). A process
    pinned once stays as it is (a later call returns the same CPU)."""
    global _pinned, _claim
    text = environ.get(ENV, "").strip()
    if _pinned is not None:
        return _pinned[0]
    if text.lower() in ("", "off"):
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError("pinning to a CPU needs Linux; set it to `off`", key=ENV)
    allowed = frozenset(os.sched_getaffinity(0))
    order = candidates(text, allowed, busy_ticks)
    if not order:
        return None
    cpu = order[0]
    if text.lower() == "auto":
        claimed = claim_cpu(order, folder or tempfile.gettempdir())
        if claimed is None:
            log.info("%s=auto: every CPU this process may use holds another engage-sync run; "
                     "this one is not pinned", ENV)
            return None
        cpu, _claim = claimed
    os.sched_setaffinity(0, {cpu})
    _pinned = (cpu, allowed)
    others = sorted(allowed - {cpu})
    log.info("the run's process is kept on CPU %d (%s=%s); its field helper runs on %s",
             cpu, ENV, text, ", ".join(map(str, others)) or f"CPU {cpu} too")
    return cpu


def child_cpus() -> frozenset[int] | None:
    """The CPUs a child process should run on (see the module), or None without a pin."""
    if _pinned is None:
        return None
    cpu, allowed = _pinned
    return allowed - {cpu} or allowed


def place_child(pid: int) -> None:
    """Move child process `pid` off the pinned CPU (no-op without a pin). A child that has
    already exited is left alone."""
    cpus = child_cpus()
    if cpus is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.sched_setaffinity(pid, cpus)
