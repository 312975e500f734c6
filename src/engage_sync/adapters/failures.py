"""Expected failures: the errors engage-sync raises on purpose, told in one line.

A bad config, a missing table, an unreachable warehouse, a missing or refused key: each is a
`SyncError` (or a `SyncAlert` failing a flow run because of one). Their messages name the
integration, file, key or table and say what to do, so the CLI prints that one line instead of
a traceback, and the flow run fails with the same line as its state message. Anything else is a
bug and keeps its traceback.

Invariant: a run that starts leaves a record whatever stops it; what stops it before its loop
opens a run row is recorded by `recorded` here, the one recorder of such failures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engage_sync.errors import NOT_THE_RUNS_FAILURE, ConfigError, RunInProgress, SyncError

if TYPE_CHECKING:
    from engage_sync.state.store import StateStore


class SyncAlert(RuntimeError):
    """Raised to fail the Prefect flow run of a sync that needs a person's attention."""


def chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then its causes and contexts, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def expected(exc: BaseException) -> bool:
    """True when the exception (or one it was raised from) is a failure raised on purpose."""
    return any(isinstance(e, SyncError | SyncAlert) for e in chain(exc))


def one_line(exc: BaseException, integration: str | None = None) -> str:
    """The message on one line, starting with `integration NAME:` when it names no
    integration or file yet."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if integration and f"integration {integration}" not in text and "file " not in text:
        text = f"integration {integration}: {text}"
    return text


@dataclass
class Recording:
    """The name a failure is recorded under: a file's stem until the file is read, then the
    integration's own name."""

    name: str


@contextmanager
def recorded(store: StateStore, name: str, mode: str = "incremental",
             only: type[Exception] = Exception) -> Iterator[Recording]:
    """A failure raised inside (of type `only`) is recorded as the integration's run, under
    the name the yielded `Recording` holds by then, then raised: for what stops a run before
    its loop opens a run row of its own (a bad file, an unset or refused key, a missing table,
    a warehouse out of reach). Nothing is recorded for another process's run (RunInProgress)
    or a failure that is not the run's own (NOT_THE_RUNS_FAILURE: a stop, a lost lease, the
    state database out of reach)."""
    recording = Recording(name)
    try:
        yield recording
    except (RunInProgress, *NOT_THE_RUNS_FAILURE):
        raise
    except only as exc:
        record_failure(store, recording.name, exc, mode)
        raise


def record_failure(store: StateStore, name: str, exc: Exception, mode: str = "incremental"
                   ) -> None:
    """The one recorder of a failure before a run's loop: a finished run of `name`,
    `config_error` for a ConfigError, else `error`, whose message is the failure's one line
    naming the integration. An unexpected exception (a bug) is named by its type only: its
    text was written by no one here and could hold anything (the log keeps its traceback)."""
    status = "config_error" if isinstance(exc, ConfigError) else "error"
    message = one_line(exc if expected(exc) else RuntimeError(
        f"stopped before reading by an unexpected {type(exc).__name__} (see the log)"), name)
    run_id = store.open_run(name, mode, None, None, job_status=status, message=message)
    store.finish_run(run_id, status, message=message)


@contextmanager
def after_the_run(then: Callable[[], None], dry_run: bool) -> Iterator[None]:
    """`then()` once the run inside ended or failed; not after a dry run, an interrupt
    (KeyboardInterrupt, SystemExit) or another process's run (RunInProgress: what follows a
    run is that run's own)."""
    ended = False
    try:
        yield
        ended = True
    except RunInProgress:
        raise
    except Exception:
        ended = True
        raise
    finally:
        if ended and not dry_run:
            then()
