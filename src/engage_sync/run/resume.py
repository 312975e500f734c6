"""Opening a run, or resuming the one a crash left behind (DESIGN rule 4).

Invariants:
- a run's window is fixed when it opens and stored with it; a resumed run reads the same
  window again from its progress;
- an unfinished run whose owner's lease has not expired is refused, never taken over, whatever
  host the owner is on (`lease.py`); one whose lease expired is taken over by exactly one
  process (a run from before leases: refused while its owner's pid lives on this host);
- what was in flight at the crash follows the in-doubt policy handed in: sent again
  (`resend`) or counted in doubt and named (`skip`);
- `Skipper` hands back, in source order, the ranges the journal settled after the run's
  progress, so the resumed run sends none of their rows again; what the progress passed is
  never loaded (`Journal.frontier`), so a resume's memory does not grow with what was settled.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from engage_sync.cursor.progress import Cursor, decode_cursor
from engage_sync.cursor.window import Window
from engage_sync.errors import RunInProgress
from engage_sync.state.owners import owner_alive, owner_gone_here, owner_token
from engage_sync.state.records import JournalEntry
from engage_sync.state.store import StateStore

log = logging.getLogger("engage_sync.run.resume")


@dataclass
class Opened:
    """A run ready to stream: its id, window, the journal entries an earlier attempt settled
    after its progress (the frontier: those before it are never read again), (skip policy)
    the numbers of the requests in flight at the crash whose rows are still to be named
    (journaled without their keys), and the highest request number journaled (the resumed
    run numbers its requests after it). `window` starts at the run's progress, `opened_on`
    at the start it was opened on (a partitioned run's parent hands that to its partitions)."""

    run_id: str
    window: Window
    opened_on: Window
    done: list[JournalEntry] = field(default_factory=list)
    crashed: set[int] = field(default_factory=set)
    last_req: int = 0


def open_run(state: StateStore, name: str, mode: str, scope: str | None,
             resend_in_doubt: bool, new_window: Callable[[], Window],
             before: Callable[[], Any], name_duplicates: bool = False,
             owner: str | None = None,
             lease_seconds: float = 60) -> Opened:
    """Resume the integration's unfinished run of this mode and scope, or open a new one on
    `new_window()`, owned by `owner` with a lease. Raises RunInProgress when the unfinished run's
    lease has not expired (or another process took it over first). Requests in
    flight at the crash that are sent again name their rows as possibly doubled when
    `name_duplicates` (`Kind.names_duplicates`)."""
    resumed = state.unfinished_run(name, mode, scope)
    if resumed is None:
        window = new_window()
        run_id = state.open_run(name, mode, window.start, window.signpost, window.floor,
                                scope=scope, owner=owner, lease_seconds=lease_seconds)
        return Opened(run_id, window, window)
    run_id = resumed["run_id"]
    _refuse_if_owned(name, resumed)
    dead = owner_gone_here(resumed.get("owner"))
    if not state.take_over(run_id, owner or owner_token(), resumed.get("owner"),
                           lease_seconds, expired_only=not dead):
        raise RunInProgress(f"integration {name}: run {resumed['seq']} was just taken over "
                            "by another process; one run per integration at a time")
    crashed: set[int] = set()
    if resend_in_doubt:
        state.drop_pending(run_id, name, name_duplicates=name_duplicates)
    else:  # at most once: what was in flight at the crash is in doubt, not re-sent
        crashed = state.mark_pending_in_doubt(run_id, name)
    signpost = decode_cursor(resumed["signpost"])
    floor = decode_cursor(resumed["floor"])
    opened_on = Window(start=decode_cursor(resumed["window_start"]),
                       signpost=signpost[0] if signpost else None,
                       floor=floor[0] if floor else None, before=before())
    window = replace(opened_on, start=decode_cursor(resumed["progress"]))
    done, last_req = state.frontier(run_id, window.start)
    log.info("integration %s: resuming run %s", name, run_id)
    return Opened(run_id, window, opened_on, done, crashed, last_req)


def refuse_if_in_progress(state: StateStore, name: str, mode: str, scope: str | None) -> None:
    """RunInProgress before anything is read (no warehouse connect, no schema guard) when the
    unfinished run a start of this mode and scope would resume is held by a live owner;
    `open_run` checks again when it opens, so this only saves the work."""
    resumed = state.unfinished_run(name, mode, scope)
    if resumed is not None:
        _refuse_if_owned(name, resumed)


def _refuse_if_owned(name: str, run: dict[str, Any]) -> None:
    """RunInProgress while the run's lease holds, unless its owner is a dead process of this host
    (or, for a run from before leases, while its owner's pid lives on this host)."""
    until = run.get("lease_until")
    if until is None:
        alive = owner_alive(run.get("owner"))
    else:
        until = until if until.tzinfo is not None else until.replace(tzinfo=UTC)
        alive = until > datetime.now(UTC) and not owner_gone_here(run.get("owner"))
    if alive:
        held = f" (its lease runs until {until.isoformat()})" if until is not None else ""
        raise RunInProgress(
            f"integration {name}: run {run['seq']} is still in progress in process "
            f"{run['owner']}{held}; wait for it (one run per integration at a time)")


class Skipper:
    """The settled ranges of a resumed run after its window's start, in source order (the
    journal's order is not: a resumed run's requests refill gaps)."""

    def __init__(self, done: list[JournalEntry], start: Cursor | None) -> None:
        self.queue = deque(sorted(
            (e for e in done if e.start is None or start is None or tuple(e.end) > tuple(start)),
            key=lambda e: tuple(e.end)))

    def __bool__(self) -> bool:
        return bool(self.queue)

    def settled(self, cursor: Cursor) -> JournalEntry | None:
        """The settled entry whose range holds `cursor`, if any. Cursors must be asked in
        source order: entries ending before `cursor` are forgotten."""
        queue = self.queue
        while queue and tuple(queue[0].end) < cursor:
            queue.popleft()
        entry = queue[0] if queue else None
        if entry is not None and (entry.start is None or tuple(entry.start) < cursor):
            return entry
        return None
