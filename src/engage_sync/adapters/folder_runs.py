"""A folder's integrations side by side: at most `folder_concurrency` at once, one rank of
kinds after another (`run/folder.py`: identities settle before data lands on them, deletes
come last), all sharing the process's rate budgets and one state store whose pool the
setting sizes.

Invariants:
- integrations of different ranks never overlap: a rank starts once every integration of
  the rank before it ended;
- at most `concurrency` integrations run at once, so at most that many warehouse engines are
  open (each run disposes of its own) and the shared state store holds at most
  `state_connections(concurrency)` connections (its pool's bound: a run's thread waits for
  one rather than opening more);
- an integration that fails leaves its own record and its exception as its result; the
  others run on;
- each runs in a copy of the caller's context (a Prefect flow run's: its task runs are the
  flow's, as its own task runner would make them);
- a DuckDB file the runs open stays open until the last of them ends (`duckdb_turns.
  kept_open`): each run's engine still opens and closes its own connections, but finds the
  database already loaded.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from pathlib import Path
from typing import TypeVar

from engage_sync.adapters.resources import open_state
from engage_sync.errors import ConfigError
from engage_sync.read import duckdb_turns
from engage_sync.run.folder import ranked
from engage_sync.state.store import StateStore

T = TypeVar("T")

DEFAULT = 4
ENV = "ENGAGE_SYNC_FOLDER_CONCURRENCY"


def folder_concurrency(value: int | None, environ: Mapping[str, str] = os.environ) -> int:
    """The setting: `value` (a flow's parameter), else the environment's ENGAGE_SYNC_FOLDER_
    CONCURRENCY, else 4. ConfigError naming it when it is not a whole number of at least 1."""
    raw: object = value if value is not None else environ.get(ENV, DEFAULT)
    try:
        chosen = int(str(raw).strip())
    except ValueError:
        chosen = 0
    if chosen < 1:
        raise ConfigError(f"folder_concurrency ({ENV}) must be a whole number of at least 1, "
                          f"not {raw!r}", key="folder_concurrency")
    return chosen


def state_connections(concurrency: int) -> int:
    """The shared state store's connections at most: two a run at once (its loop, and its
    lease's heartbeat or a settle's hook beside it)."""
    return 2 * concurrency


def shared_state(url: str | None, concurrency: int) -> StateStore:
    """One state store for a folder's runs, its pool sized by the setting."""
    return open_state(url, pool=state_connections(concurrency))


def rank_groups(paths: list[Path]) -> list[list[Path]]:
    """The folder's files in run order, cut where the rank of their kinds changes."""
    return [[path for _, path in group]
            for _, group in groupby(ranked(paths), key=lambda rp: rp[0])]


def run_folder(paths: list[Path], run: Callable[[Path], T], concurrency: int
               ) -> dict[str, T | Exception]:
    """`run` of each file (see the invariants); by file stem, in run order, each its result
    or the exception it raised."""
    groups = rank_groups(paths)
    results: dict[str, T | Exception] = {p.stem: ValueError("not run") for g in groups
                                         for p in g}

    def one(path: Path) -> None:
        try:
            results[path.stem] = run(path)
        except Exception as exc:  # its own record says what happened; the others run on
            results[path.stem] = exc

    with duckdb_turns.kept_open(), ThreadPoolExecutor(max_workers=concurrency,
                                                      thread_name_prefix="folder") as pool:
        for group in groups:
            done = [pool.submit(contextvars.copy_context().run, one, p) for p in group]
            for future in done:
                future.result()
    return results
