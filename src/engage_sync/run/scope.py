"""What one run covers: the loop runs over a scope and asks it, never which scope it is.

A scope owns a run's name in the runs table, the key its unfinished run is resumed by, the
window a new run of it opens on, whether it may move the integration cursor, what an error
leaves behind, and whether it finished already. `WholeRun` is the integration's own run; a
partition of a partitioned run is `partitions.scope.PartitionScope`.

Invariants a scope keeps:
- `moves_cursor` False: the run never writes the integration cursor (someone else does);
- `failed` leaves the run either finished with the error (nothing resumes it) or resumable
  (everything it settled kept, nothing pending), never half of each;
- `finished` returns a record only for a run that already ended: a scope run twice (a
  cluster recomputing a lost result) sends nothing the second time;
- `resumes_after_error` says which of the two `failed` does; `tries` is how many times the
  rows it reads were sent before (0 but for a retry of failed rows: `run/retries.py`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from engage_sync.config.run_options import RunOptions
from engage_sync.cursor.progress import Cursor
from engage_sync.cursor.window import Window
from engage_sync.errors import ConfigError, SyncError
from engage_sync.run.windows import Windows
from engage_sync.state.store import StateStore


class Scope(Protocol):
    moves_cursor: bool
    """Whether settled progress may move the integration cursor."""
    counts_null_cursors: bool
    """Whether this run counts the rows it cannot read for a NULL cursor (once per run)."""
    own_process: bool
    """Whether the run owns its process (may start a helper process: not a Dask worker)."""
    resumes_after_error: bool
    """Whether `failed` leaves the run resumable (else it finishes it with the error)."""
    tries: int
    """Sends its rows had before this run (its failed requests are kept with one more)."""

    @property
    def siblings(self) -> str | None:
        """What the runs of one piece of work have in common, so that those side by side in
        one process may share what they read of the state at their start (the partitions of
        one parent run: its id); None for a run on its own."""
        ...

    @property
    def only_keys(self) -> frozenset[str] | None:
        """The only row keys this run sends (a retry of one request's items), or None: all."""
        ...

    def run_name(self, integration: str) -> str: ...

    def resume_key(self, options: RunOptions) -> str | None:
        """What tells this scope's unfinished run from another of the same name and mode."""
        ...

    def finished(self, state: StateStore, run_name: str) -> dict[str, Any] | None:
        """The run row of this scope if it ran to its end already, else None."""
        ...

    def new_window(self, windows: Windows, state: StateStore, stored: Cursor | None,
                   now: datetime) -> Window:
        """The window a new run of this scope opens on (`windows`: the run's)."""
        ...

    def narrow(self, window: Window) -> Window:
        """The rows of the window this scope reads."""
        ...

    def failed(self, state: StateStore, run_id: str, owner: str, integration: str,
               error: SyncError) -> None:
        """Record what a SyncError leaves of the run (see the invariants)."""
        ...


class WholeRun:
    """The integration's own run: its name, its cursor, and an error finishes it."""

    moves_cursor = True
    counts_null_cursors = True
    own_process = True
    resumes_after_error = False
    tries = 0
    siblings: str | None = None
    only_keys: frozenset[str] | None = None

    def run_name(self, integration: str) -> str:
        return integration

    def resume_key(self, options: RunOptions) -> str | None:
        return options.scope

    def finished(self, state: StateStore, run_name: str) -> dict[str, Any] | None:
        return None  # a finished run is history: the next start opens a new one

    def new_window(self, windows: Windows, state: StateStore, stored: Cursor | None,
                   now: datetime) -> Window:
        return windows.new(state, stored, now)

    def narrow(self, window: Window) -> Window:
        return window

    def failed(self, state: StateStore, run_id: str, owner: str, integration: str,
               error: SyncError) -> None:
        status = "config_error" if isinstance(error, ConfigError) else "error"
        state.finish_run(run_id, status, message=str(error))
