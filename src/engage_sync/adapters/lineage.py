"""Whether a run emits OpenLineage events, and the observer `wiring.sync_file` tells.

Off unless OpenLineage's own configuration is in the environment: OPENLINEAGE_URL (HTTP),
OPENLINEAGE_CONFIG (an openlineage.yml) or OPENLINEAGE__TRANSPORT__TYPE (any transport, e.g.
`file`); OPENLINEAGE_DISABLED=true turns it off again. The lineage backend is the team's, shared
with its other tools, and its key must not sit in an integration file, so it is configured
where those tools read it. When off, openlineage is never imported. Dry runs emit nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

from engage_sync.errors import ConfigError, RunInProgress
from engage_sync.read.plan import RunPlan
from engage_sync.state.store import StateStore
from engage_sync.status.record import record

SWITCHES = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE__TRANSPORT__TYPE")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True when one of SWITCHES is set and OPENLINEAGE_DISABLED is not `true`."""
    env = os.environ if environ is None else environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name) for name in SWITCHES)


class Observer(Protocol):
    def named(self, name: str) -> None: ...

    def start(self, plan: RunPlan, engine: sa.Engine) -> None: ...

    def finish(self, record: dict[str, Any] | None) -> None: ...


class Silent:
    """The observer when lineage is off: does nothing."""

    def named(self, name: str) -> None:
        return None

    def start(self, plan: RunPlan, engine: sa.Engine) -> None:
        return None

    def finish(self, record: dict[str, Any] | None) -> None:
        return None


@contextmanager
def observe(path: str | Path, *, live: bool = True,
            store: StateStore | None = None) -> Iterator[Observer]:
    """An observer of one run of the file at `path`; an exception raised inside is told as
    FAIL (START first if the run never started), with the counts of the record the run left in
    `store`, then raised on; but RunInProgress, told nothing (a schedule's every tick during
    another process's long run)."""
    since = datetime.now(UTC)
    if not live or not enabled():
        yield Silent()
        return
    try:
        from engage_sync.adapters import lineage_events
    except ImportError as exc:
        raise ConfigError("OpenLineage is configured in the environment but openlineage-python "
                          "is not installed: pip install 'engage-sync[lineage]' (or unset "
                          f"{', '.join(SWITCHES)})") from exc
    client = lineage_events.new_client()
    run = lineage_events.RunLineage(client, Path(path).stem)
    try:
        yield run
    except RunInProgress:  # another process's run holds it: this start was no run, told nothing
        raise
    except BaseException as exc:  # FAIL; ABORT for an interrupt (Ctrl-C, SystemExit)
        names = dict.fromkeys([run.job_name, run.integration_name])
        run.fail(exc, aborted=not isinstance(exc, Exception),
                 record=_left_by_run(store, names, since))
        raise
    finally:
        client.close(5.0)


def _left_by_run(store: StateStore | None, names: Iterable[str], since: datetime
                 ) -> dict[str, Any] | None:
    """The record of the newest run of the integration (under one of `names`) that ended at or
    after `since` or is still running: the run that raised, since one process at a time runs
    an integration. None when there is none, or the state database cannot say (its counts are
    then unknown, never told as zeros)."""
    if store is None:
        return None
    try:
        for name in names:
            for run in store.runs_newest_first(name, 0, 1):
                ended = run["sync_finish_time"]
                if ended is None or _utc(ended) >= since:
                    return record(run)
    except Exception:
        return None
    return None


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
