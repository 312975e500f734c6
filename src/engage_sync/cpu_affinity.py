"""A run kept on one CPU, its field helper on the others: opt-in (ENGAGE_SYNC_PIN_CPU: `off`,
the default, leaves the run to the kernel; `auto` or a CPU number pins it; Linux only).

Why: the run's threads share one interpreter lock, and a lock handed between cores costs
cross-core wake-ups and cold caches; on a host of its own a pinned run is faster (figures:
benchmarks/README.md). It is not the default because a data tool that moves its own threads
between CPUs surprises a shared host, a container with a CPU quota or a laptop.

`auto` follows load (`cpu_watch`): runs that cannot see each other's claims (separate
containers, a private /tmp) can take the same CPU; the first to see another's work there
moves to a freer CPU, or lets go of the pin. A CPU number is kept as given, never moved. A
partitioned run is never pinned: its partitions are meant to use the cores.

Invariants:
- unset or blank is `off`: no affinity is read or set, no claim, no watcher;
- Linux only (`os.sched_setaffinity`); elsewhere any value but `off` is a ConfigError;
- `auto` pins nothing when the run may use one CPU only, or when the CPUs' load cannot be
  read or trusted (`load_reader`: a view mounted over /proc/stat, such as lxcfs's in a
  container, or a CPU without a line);
- a pin the system refuses (a sandbox's policy, CPUs taken away meanwhile) leaves the run
  unpinned, logged, never failed; at its end the thread gets back the CPUs it had, unless
  they were changed meanwhile (then they are left as set); a refusal then is logged too;
- `run_pin` pins the calling thread for the run's length, and so the threads the run starts
  (they inherit it); threads started before (Prefect's own) are left as they are; at its end
  the calling thread gets back the CPUs it had;
- one run of a process holds the pin at a time; another run meanwhile is not pinned;
- never widens what the host allowed: the CPU is one the calling thread may use;
- `auto` takes only a CPU that no other run sharing this temporary directory has claimed (a
  `flock` on `engage-sync-cpu-N.lock`, held while the run is on that CPU, released by the
  kernel if the process dies), the least busy, ties at random; with none left, or no claim
  possible, the run is not pinned and says so;
- a child process placed with `place_child` while a run holds the pin runs on the CPUs the
  run's thread had before, less the pinned one (all of them if there is no other), and moves
  with the pin, until the run waits for it (`release_child`: then it gets all of them, and
  the pin stops following load: the child's work on the run's CPU is the run's own);
- `auto` moves (`move_pin`) every thread of the process on exactly the pinned CPU, so the
  threads the run started, and its placed children that are still its children; it takes
  the new CPU's claim first, and does not move if another run holds it; letting go
  (`free_pin`) gives them the CPUs the run had and releases the claim, for the rest of the
  run; a child placed after that gets them too;
- a watcher that cannot be started (no thread to be had) leaves the run pinned where it is.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from engage_sync.cpu_watch import Watcher, sampler
from engage_sync.errors import ConfigError

ENV = "ENGAGE_SYNC_PIN_CPU"
DEFAULT = "off"  # opt-in: a default run leaves the scheduler alone
SAMPLE_SECONDS = 0.05  # `auto` compares the allowed CPUs' busy time over this long
CLAIM = "engage-sync-cpu-{}.lock"
log = logging.getLogger("engage_sync.cpu")
_RANDOM = random.Random()  # ours: the global generator is the application's to seed and draw

_held = threading.Lock()  # one run of the process holds the pin


@dataclass
class Pin:
    """The run's pin while it holds one: its CPU (None once let go), the CPUs its thread had
    before, its claim's descriptor, the children placed off it, its watcher (`auto`)."""

    cpu: int | None
    allowed: frozenset[int]
    claim: int | None = None
    children: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    watcher: Watcher | None = None


_pinned: Pin | None = None


def pin_setting(environ: Mapping[str, str]) -> str | None:
    """ENGAGE_SYNC_PIN_CPU checked: `auto`, a CPU number this thread may use, or None (`off`,
    also when unset). Raises ConfigError naming the setting."""
    text = environ.get(ENV, "").strip().lower() or DEFAULT
    if text == "off":
        return None
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError("pinning to a CPU needs Linux; set it to `off`", key=ENV)
    if text != "auto":  # a number: checked against this thread's CPUs (no load is read)
        candidates(text, frozenset(os.sched_getaffinity(0)), dict)
    return text


def candidates(text: str, allowed: frozenset[int], busy: Callable[[], Mapping[int, int]],
               tiebreak: Callable[[], float] = _RANDOM.random) -> list[int] | None:
    """The CPUs the setting `text` lets the run take, in order of preference, or None (`off`
    or empty): a number names one of `allowed`; `auto` gives every allowed CPU, the least
    busy first (`busy()` read twice, `SAMPLE_SECONDS` apart; ties at random, so that runs
    started together on idle CPUs do not all take the lowest). Raises ConfigError naming the
    setting."""
    text = text.strip().lower()
    if text in ("", "off"):
        return None
    if text == "auto":
        before = busy()
        time.sleep(SAMPLE_SECONDS)
        after = busy()
        ties = {cpu: tiebreak() for cpu in allowed}
        return sorted(allowed, key=lambda cpu: (after.get(cpu, 0) - before.get(cpu, 0),
                                                ties[cpu]))
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
    """Each CPU's clock ticks so far running processes: user, nice and system (guest time is
    already in user time). Interrupts and steal are left out: a kernel that accounts them
    apart leaves them out of the run's own CPU time too, where they would read as another's."""
    out: dict[int, int] = {}
    with open(stat, encoding="ascii") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                out[int(name[3:])] = sum(int(x) for x in fields[:3])
    return out


def load_reader(allowed: frozenset[int], stat: str = "/proc/stat",
                mountinfo: str = "/proc/self/mountinfo") -> Callable[[], dict[int, int]]:
    """`busy_ticks` checked for the CPUs `allowed`, read once now. Raises ValueError when they
    cannot be trusted: something is mounted over /proc/stat (lxcfs gives a container its own
    view, renumbered, without the other containers' load), or a CPU has no line."""
    with suppress(OSError), open(mountinfo, encoding="utf-8", errors="replace") as f:
        if any(line.split()[4:5] == [stat] for line in f):
            raise ValueError(f"{stat} is a view mounted over the kernel's")

    def read() -> dict[int, int]:
        ticks = busy_ticks(stat)
        if missing := allowed - ticks.keys():
            raise ValueError(f"{stat} has no line for CPU {min(missing)}")
        return ticks

    read()
    return read


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
    folder = folder or tempfile.gettempdir()
    pin = Pin(cpu=None, allowed=frozenset(os.sched_getaffinity(0)))
    try:
        cpu, pin.claim = _take(setting, pin.allowed, folder)
        if cpu is None:
            yield None
            return
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:
            log.info("%s=%s: the system refused to keep the run on CPU %d (%s); it is not "
                     "pinned", ENV, setting, cpu, exc.strerror or exc)
            yield None
            return
        pin.cpu = cpu
        _pinned = pin
        others = sorted(pin.allowed - {cpu})
        log.info("the run is kept on CPU %d (%s=%s); its field helper runs on %s", cpu, ENV,
                 setting, ", ".join(map(str, others)) or f"CPU {cpu} too")
        watcher = None
        try:
            watcher = pin.watcher = _watch(pin, folder) if setting == "auto" else None
            yield cpu
        finally:
            if watcher is not None:
                watcher.stop()
            _pinned = None
            if pin.cpu is not None:
                _let_go(pin.cpu, pin.allowed)
    finally:
        if pin.claim is not None:
            os.close(pin.claim)
        _held.release()


def _take(setting: str, allowed: frozenset[int], folder: str) -> tuple[int | None, int | None]:
    """The CPU `setting` gives the run and its claim's descriptor (None for a number); (None,
    None) when `auto` has nothing to take: one CPU allowed (nothing to gain, said nowhere),
    the CPUs' load unreadable, or every CPU claimed (both logged)."""
    if setting != "auto":
        order = candidates(setting, allowed, busy_ticks)
        return (order[0] if order else None), None
    if len(allowed) < 2:
        return None, None
    try:
        order = candidates(setting, allowed, load_reader(allowed)) or []
    except (OSError, ValueError) as exc:
        log.info("%s=auto: the CPUs' load cannot be read (%s); the run is not pinned", ENV, exc)
        return None, None
    claimed = claim_cpu(order, folder)
    if claimed is None:
        log.info("%s=auto: every CPU this run may use is claimed by another run (or cannot "
                 "be claimed); it is not pinned", ENV)
        return None, None
    return claimed


def _watch(pin: Pin, folder: str) -> Watcher | None:
    """A watcher that moves `pin` where its CPU is freer (`cpu_watch`), or None when the
    CPUs' busy time cannot be read (the pin then stays where it is)."""
    assert pin.cpu is not None
    try:
        sample = sampler(pin.allowed, load_reader(pin.allowed), os.sysconf("SC_CLK_TCK"))
        return Watcher(pin.cpu, sample, lambda cpu: move_pin(pin, cpu, folder),
                       lambda: free_pin(pin)).start()
    except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: no thread to be had
        log.info("%s=auto: the pin cannot follow the CPUs' load (%s); it stays on CPU %d",
                 ENV, exc, pin.cpu)
        return None


def move_pin(pin: Pin, cpu: int, folder: str) -> bool:
    """Moves the run's threads (those on exactly its CPU) and its placed children to `cpu`,
    and its claim with them. False if it cannot: the system refuses, or another run that
    shares the claims' folder holds `cpu`'s."""
    with pin.lock:
        old = pin.cpu
        if old is None or cpu not in pin.allowed:
            return False
        claimed = claim_cpu([cpu], folder)
        if claimed is None:
            return False
        if not _retarget({old}, {cpu}):
            os.close(claimed[1])
            return False
        if pin.claim is not None:
            os.close(pin.claim)
        pin.claim = claimed[1]
        pin.cpu = cpu
        _place(pin.children, pin.allowed - {cpu} or pin.allowed)
        return True


def free_pin(pin: Pin) -> None:
    """Lets go of the pin before the run's end: its threads and children get back the CPUs
    the run had, and its claim is released."""
    with pin.lock:
        if pin.cpu is None:
            return
        _retarget({pin.cpu}, set(pin.allowed))
        pin.cpu = None
        if pin.claim is not None:
            os.close(pin.claim)
            pin.claim = None
        _place(pin.children, pin.allowed)


def _retarget(old: set[int], new: set[int]) -> bool:
    """Every thread of this process whose CPUs are exactly `old` gets `new` (twice over, for
    threads started meanwhile). False if the system refuses (logged)."""
    for _ in range(2):
        for task in os.listdir("/proc/self/task"):
            try:
                if os.sched_getaffinity(int(task)) == old:
                    os.sched_setaffinity(int(task), new)
            except ProcessLookupError:
                continue  # the thread ended
            except OSError as exc:
                log.info("%s: the run's threads could not be moved (%s)", ENV,
                         exc.strerror or exc)
                return False
    return True


def _place(pids: list[int], cpus: frozenset[int]) -> None:
    """`cpus` for each of `pids` still a child of this process; the others are dropped from
    the list (an exited child's number may be another process's by now)."""
    for pid in list(pids):
        if not _is_child(pid):
            pids.remove(pid)
            continue
        with suppress(ProcessLookupError, PermissionError):
            os.sched_setaffinity(pid, cpus)


def _is_child(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1]) == os.getpid()
    except (OSError, ValueError, IndexError):
        return False


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
    pin = _pinned
    if pin is None or pin.cpu is None:
        return None
    return pin.allowed - {pin.cpu} or pin.allowed


def place_child(pid: int) -> None:
    """Move child process `pid` off the pinned CPU, and keep it off if the pin moves (no-op
    without a pin). A child that has already exited is left alone."""
    pin = _pinned
    if pin is None:
        return
    with pin.lock:
        cpus = child_cpus()
        if cpus is None:  # let go meanwhile: the child inherited the pin, so it gets all
            _place([pid], pin.allowed)
            return
        pin.children.append(pid)
        _place([pid], cpus)


def release_child(pid: int) -> None:
    """The run now waits for child process `pid`: it may use every CPU the run had, the
    pinned one too, and no longer moves with the pin, which stays where it is: the watcher
    stops, as it would read the child's work on the run's CPU as another's (no-op without a
    pin)."""
    pin = _pinned
    if pin is None:
        return
    if pin.watcher is not None:
        pin.watcher.stop()  # before the lock: a move under way holds it
    with pin.lock:
        if pid in pin.children:
            pin.children.remove(pid)
        _place([pid], pin.allowed)
