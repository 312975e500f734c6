"""Whether a run emits OpenLineage events, and the observer `wiring.sync_file` tells.

Off unless OpenLineage's own configuration is in the environment: OPENLINEAGE_URL (HTTP),
OPENLINEAGE_CONFIG (an openlineage.yml) or OPENLINEAGE__TRANSPORT__TYPE (any transport, e.g.
`file`); OPENLINEAGE_DISABLED=true turns it off again. The lineage backend is the team's, shared
with its other tools, and its key must not sit in an integration file, so it is configured
where those tools read it. When off, openlineage is never imported. Dry runs emit nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa

from engage_sync.config.integration import Integration
from engage_sync.errors import ConfigError, RunInProgress

SWITCHES = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE__TRANSPORT__TYPE")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True when one of SWITCHES is set and OPENLINEAGE_DISABLED is not `true`."""
    env = os.environ if environ is None else environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name) for name in SWITCHES)


class Observer(Protocol):
    def start(self, integration: Integration, engine: sa.Engine) -> None: ...

    def finish(self, record: dict[str, Any] | None) -> None: ...


class Silent:
    """The observer when lineage is off: does nothing."""

    def start(self, integration: Integration, engine: sa.Engine) -> None:
        return None

    def finish(self, record: dict[str, Any] | None) -> None:
        return None


@contextmanager
def observe(path: str | Path, *, live: bool = True) -> Iterator[Observer]:
    """An observer of one run of the file at `path`; an exception raised inside is told as
    FAIL (START first if the run never started), then raised on; but RunInProgress, told
    nothing (a schedule's every tick during another process's long run)."""
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
        run.fail(exc, aborted=not isinstance(exc, Exception))
        raise
    finally:
        client.close(5.0)
