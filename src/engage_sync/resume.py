"""Opening a run, or resuming the one a crash left behind (DESIGN rule 4).

Invariants:
- a run's window is fixed when it opens and stored with it; a resumed run reads the same
  window again from its progress;
- a run whose owning process is still alive on this host is refused, never taken over;
- what was in flight at the crash follows the in-doubt policy handed in: sent again
  (`resend`) or counted in doubt and named (`skip`);
- `Skipper` hands back, in source order, the ranges the journal settled, so the resumed run
  sends none of their rows again.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engage_sync.errors import RunRefused
from engage_sync.progress import Cursor, decode_cursor
from engage_sync.state import JournalEntry, StateStore, owner_alive
from engage_sync.window import Window

log = logging.getLogger("engage_sync.resume")


@dataclass
class Opened:
    """A run ready to stream: its id, window, the journal entries an earlier attempt settled,
    and (skip policy) the numbers of the requests in flight at the crash whose rows are still
    to be named (journaled without their keys)."""

    run_id: str
    window: Window
    done: list[JournalEntry] = field(default_factory=list)
    crashed: set[int] = field(default_factory=set)


def open_run(state: StateStore, name: str, mode: str, scope: str | None,
             resend_in_doubt: bool, new_window: Callable[[], Window],
             before: Callable[[], Any], idempotent: bool = True) -> Opened:
    """Resume the integration's unfinished run of this mode and scope, or open a new one on
    `new_window()`. Raises RunRefused when the unfinished run's owner is alive. Requests in
    flight at the crash that are sent again name their rows as possibly doubled unless the
    kind is `idempotent`."""
    resumed = state.unfinished_run(name, mode, scope)
    if resumed is None:
        window = new_window()
        run_id = state.open_run(name, mode, window.start, window.signpost, window.floor,
                                scope=scope)
        return Opened(run_id, window)
    run_id = resumed["run_id"]
    if owner_alive(resumed.get("owner")):
        raise RunRefused(
            f"integration {name}: run {resumed['seq']} is still in progress in process "
            f"{resumed['owner']}; wait for it (one run per integration at a time)")
    state.take_over(run_id)
    crashed: set[int] = set()
    if resend_in_doubt:
        state.drop_pending(run_id, name, name_duplicates=not idempotent)
    else:  # at most once: what was in flight at the crash is in doubt, not re-sent
        crashed = state.mark_pending_in_doubt(run_id, name)
    signpost = decode_cursor(resumed["signpost"])
    floor = decode_cursor(resumed["floor"])
    window = Window(start=decode_cursor(resumed["progress"]),
                    signpost=signpost[0] if signpost else None,
                    floor=floor[0] if floor else None, before=before())
    done = [e for e in state.journal_entries(run_id) if e.state != "pending"]
    log.info("integration %s: resuming run %s", name, run_id)
    return Opened(run_id, window, done, crashed)


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
