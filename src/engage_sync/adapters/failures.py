"""Expected failures: the errors engage-sync raises on purpose, told in one line.

A bad config, a missing table, an unreachable warehouse, a missing or refused key: each is a
`SyncError` (or a `SyncAlert` failing a flow run because of one). Their messages name the
integration, file, key or table and say what to do, so the CLI prints that one line instead of
a traceback, and the flow run fails with the same line as its state message. Anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator

from engage_sync.errors import SyncError


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
