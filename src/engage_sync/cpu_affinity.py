"""A run kept on one CPU, its field helper on the others (opt-in: ENGAGE_SYNC_PIN_CPU=auto
or a CPU number; `off` or unset leaves the run to the kernel).

Why: the run's threads (the one that reads and packs, the send threads, the helper's writer)
share one interpreter lock, so together they use at most about one core of Python. Left free,
the kernel spreads them over the cores, and every hand-over of the lock between two cores
costs a cross-core wake-up and cold caches. On the 2-core benchmark machine, keeping the run
on one CPU took a first diffed run of 1,000,000 attributes from 43,024 to 53,217 rows/s with
10 % less CPU, and 1,000,000 events from 31,539 to 39,168 rows/s with 21 % less
(benchmarks/README.md, "One core for the run's process").

Why opt-in: a pin cannot follow load. Unpinned neighbours are not the risk (the kernel moves
them off a pinned CPU: benchmarks/README.md, "The pin by default, and back"); runs that
cannot see each other's claims are. Runs in separate containers (or services with a private
/tmp) each claim in their own temporary directory, so two that start together can take the
same CPU and keep it for their whole length, at half speed each. Use it where a run has its
worker to itself, or where runs share a temporary directory. A partitioned run is never
pinned: its partitions are meant to use the cores.

Invariants:
- Linux only (`os.sched_setaffinity`); elsewhere any value but `off` is a ConfigError;
- a pin the system refuses (a sandbox's policy, CPUs taken away meanwhile) leaves the run
  unpinned, logged, never failed; at its end the thread gets back the CPUs it had, unless
  they were changed meanwhile (then they are left as set); a refusal then is logged too;
- `run_pin` pins the calling thread for the run's length, and so the threads the run starts
  (they inherit it); threads started before (Prefect's own) are left as they are; at its end
  the calling thread gets back the CPUs it had;
- one run of a process holds the pin at a time; another run meanwhile is not pinned;
- never widens what the host allowed: the CPU is one the calling thread may use;
- `auto` takes only a CPU that no other run sharing this temporary directory has claimed (a
  `flock` on `engage-sync-cpu-N.lock`, held for the run, released by the kernel if the process
  dies); with none left, or no claim possible, the run is not pinned and says so;
- a child process placed with `place_child` while a run holds the pin runs on the CPUs the
  run's thread had before, less the pinned one (all of them if there is no other).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress

from engage_sync.errors import ConfigError

ENV = "ENGAGE_SYNC_PIN_CPU"
SAMPLE_SECONDS = 0.05  # `auto` compares the allowed CPUs' busy time over this long
CLAIM = "engage-sync-cpu-{}.lock"
log = logging.getLogger("engage_sync.cpu")

_held = threading.Lock()  # one run of the process holds the pin
_pinned: tuple[int, frozenset[int]] | None = None  # (the CPU, the thread's CPUs before)


def pin_setting(environ: Mapping[str, str]) -> str | None:
    """ENGAGE_SYNC_PIN_CPU checked: `auto`, a CPU number this thread may use, or None (unset
    or `off`). Raises ConfigError naming the setting."""
    text = environ.get(ENV, "").strip().lower()
    if text in ("", "off"):
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError("pinning to a CPU needs Linux; set it to `off`", key=ENV)
    if text != "auto":  # a number: checked against this thread's CPUs (no load is read)
        candidates(text, frozenset(os.sched_getaffinity(0)), dict)
    return text


def candidates(text: str, allowed: frozenset[int], busy: Callable[[], Mapping[int, int]]
               ) -> list[int] | None:
    """The CPUs the setting `text` lets the run take, in order of preference, or None (`off`
    or empty): a number names one of `allowed`; `auto` gives every allowed CPU, the least
    busy first (`busy()` read twice, `SAMPLE_SECONDS` apart; ties by number).
    Raises ConfigError naming the setting."""
    text = text.strip().lower()
    if text in ("", "off"):
        return None
    if text == "auto":
        before = busy()
        time.sleep(SAMPLE_SECONDS)
        after = busy()
        return sorted(allowed, key=lambda cpu: (after.get(cpu, 0) - before.get(cpu, 0), cpu))
    if not text.isdecimal() or not text.isascii():
        raise ConfigError("must be `off`, `auto` or a CPU number", key=ENV)
    if int(text) not in allowed:
        raise ConfigError(f"CPU {int(text)} is not one this process may run on "
                          f"({', '.join(map(str, sorted(allowed)))})", key=ENV)
    return [int(text)]


def claim_cpu(order: Sequence[int], folder: str) -> tuple[int, int] | None:
    """The first CPU of `order` that no other run claimed in `folder`, and the claim: an open
    descriptor holding an exclusive lock on `folder`/engage-sync-cpu-N.lock (close it to let
    go). A CPU whose file cannot be opened (another user's, a folder not writable) is passed
    over. None when none is left."""
    import fcntl  # POSIX only: imported where used, so the module loads everywhere

    for cpu in order:
        try:  # read-only is enough to lock; another user's file is readable, usually
            fd = os.open(os.path.join(folder, CLAIM.format(cpu)), os.O_RDONLY | os.O_CREAT,
                         0o666)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return cpu, fd
    return None


def busy_ticks(stat: str = "/proc/stat") -> dict[int, int]:
    """Each CPU's busy clock ticks so far (all but idle and I/O wait; guest time is already in
    user time), from /proc/stat."""
    out: dict[int, int] = {}
    with open(stat, encoding="ascii") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                ticks = [int(x) for x in fields[:8]]
                out[int(name[3:])] = sum(ticks) - sum(ticks[3:5])
    return out


@contextmanager
def run_pin(setting: str | None, folder: str | None = None) -> Iterator[int | None]:
    """For the length of a run: the calling thread (and the threads it starts) on the CPU
    that `setting` (`pin_setting`) names; yields it, or None when not pinned (no setting,
    another run of this process holds the pin, or `auto` found no CPU to claim in `folder`,
    default the temporary directory). See the module for the invariants."""
    global _pinned
    if setting is None:
        yield None
        return
    if not _held.acquire(blocking=False):
        log.info("%s: another run of this process is pinned; this one is not", ENV)
        yield None
        return
    claim: int | None = None
    try:
        allowed = frozenset(os.sched_getaffinity(0))
        order = candidates(setting, allowed, busy_ticks) or []
        cpu = order[0] if order else None
        if setting == "auto":
            claimed = claim_cpu(order, folder or tempfile.gettempdir())
            cpu, claim = claimed if claimed is not None else (None, None)
        if cpu is None:
            log.info("%s=auto: every CPU this run may use is claimed by another run (or "
                     "cannot be claimed); it is not pinned", ENV)
            yield None
            return
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:
            log.info("%s=%s: the system refused to keep the run on CPU %d (%s); it is not "
                     "pinned", ENV, setting, cpu, exc.strerror or exc)
            yield None
            return
        _pinned = (cpu, allowed)
        others = sorted(allowed - {cpu})
        log.info("the run is kept on CPU %d (%s=%s); its field helper runs on %s", cpu, ENV,
                 setting, ", ".join(map(str, others)) or f"CPU {cpu} too")
        try:
            yield cpu
        finally:
            _pinned = None
            _let_go(cpu, allowed)
    finally:
        if claim is not None:
            os.close(claim)
        _held.release()


def _let_go(cpu: int, allowed: frozenset[int]) -> None:
    """Give the calling thread back the CPUs it had before the pin on `cpu`, unless someone
    changed its CPUs meanwhile (`taskset`): then they are left as they were set (never widen
    what the host narrowed). A refusal is logged, not raised: the run is over."""
    try:
        if frozenset(os.sched_getaffinity(0)) != {cpu}:
            log.info("%s: the run's CPUs were changed while it ran; left as they are", ENV)
            return
        os.sched_setaffinity(0, allowed)  # the kernel keeps it within the CPU set it allows
    except OSError as exc:
        log.info("%s: the run's thread could not get its CPUs back (%s)", ENV,
                 exc.strerror or exc)


def child_cpus() -> frozenset[int] | None:
    """The CPUs a child process should run on (see the module), or None without a pin."""
    pinned = _pinned
    if pinned is None:
        return None
    cpu, allowed = pinned
    return allowed - {cpu} or allowed


def place_child(pid: int) -> None:
    """Move child process `pid` off the pinned CPU (no-op without a pin). A child that has
    already exited is left alone."""
    cpus = child_cpus()
    if cpus is None:
        return
    with suppress(ProcessLookupError):
        os.sched_setaffinity(pid, cpus)
