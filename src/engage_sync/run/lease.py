"""Run ownership as a lease in the state database.

A run is owned by one process, named by an owner token unique to that attempt (host, pid and
a random part). The owner holds a lease: `lease_until` on the run's row, renewed by a
heartbeat thread every third of `lease_seconds`. Invariants:
- an unfinished run whose lease has not expired is never taken over, whatever host its owner
  is on (`resume.open_run` refuses); one whose lease expired is taken over by a
  compare-and-set on (owner, lease_until), so of two processes racing for it one wins;
- the owner sends nothing once its lease may have expired: `check` runs before every attempt
  to send (the deliverer's guard) and fails when the last renewal is older than the lease,
  measured on this process's monotonic clock from before the renewal was asked (so a process
  frozen with SIGSTOP past its lease, then woken, stops before sending);
- every journal write and settlement is fenced in SQL on the owner (`StateStore`), so a woken
  process whose run was taken over writes nothing to it either.
Hosts compare `lease_until` against their own UTC clock when taking over: keep clocks in sync
(NTP) to well under the lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from engage_sync.errors import LeaseLost
from engage_sync.state.owners import new_owner as new_owner  # the run's token, built there
from engage_sync.state.store import StateStore

log = logging.getLogger("engage_sync.run.lease")


class Lease:
    """The lease of one run held by this process: heartbeat while the run lives."""

    def __init__(self, state: StateStore, run_id: str, owner: str, seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state, self.run_id, self.owner, self.seconds = state, run_id, owner, seconds
        self.clock = clock
        self.valid_until = clock() + seconds  # taken (or opened) just before this
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name=f"lease-{run_id[:8]}")

    def start(self) -> Lease:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def check(self) -> None:
        """Raise LeaseLost unless this process surely still owns the run."""
        if self.lost or self.clock() >= self.valid_until:
            raise LeaseLost(
                f"run {self.run_id}: this process lost its lease (it was not renewed for "
                f"{self.seconds:g} s, or another process took the run over); it stops without "
                "sending more, and the run's current owner finishes it")

    def renew(self) -> bool:
        """One heartbeat; False once the run belongs to someone else."""
        asked = self.clock()
        try:
            renewed = self.state.renew_lease(self.run_id, self.owner, self.seconds)
        except Exception as exc:  # the state database is unreachable: the lease runs out
            log.warning("run %s: lease not renewed: %s", self.run_id, type(exc).__name__)
            return True
        if renewed:
            self.valid_until = asked + self.seconds
        else:
            self.lost = True
        return renewed

    def _beat(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            if not self.renew():
                if self._taken_over():
                    log.warning("run %s: another process owns the run now; stopping",
                                self.run_id)
                return

    def _taken_over(self) -> bool:
        """After a refused renewal: whether the run is someone else's, not just finished by
        this process (the heartbeat can fire between the run's end and `stop`)."""
        try:
            return self.state.run(self.run_id)["job_status"] == "running"
        except Exception:  # the state database is unreachable: say so as if taken over
            return True
