"""One exception taxonomy rooted in SyncError.

Rejected rows are data (see `model.Reject`), never exceptions. Library exceptions are
translated at the boundary with ``raise ... from exc`` so messages name the integration.
"""

from __future__ import annotations


class SyncError(Exception):
    """Base of every error engage-sync raises on purpose."""


class ConfigError(SyncError):
    """A bad integration file or setting. Terminal: the run is recorded as config_error."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None) -> None:
        parts = (f"file {file}" if file else "", f"key {key}" if key else "")
        where = ", ".join(p for p in parts if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.file = file
        self.key = key


class SchemaChanged(ConfigError):
    """The source's schema changed under a mapped column or payload key since the last run
    (the schema guard): recorded as config_error; nothing was sent."""


class SourceError(SyncError):
    """The warehouse could not be read (connection, missing table or column, bad query)."""


class DeliveryError(SyncError):
    """The service could not be reached or refused a request."""


class FatalDeliveryError(DeliveryError):
    """The service refused the credentials or permissions (401, 403): the run stops.

    Retryable and in-doubt answers are not exceptions: the delivery layer classifies them
    into outcomes and retries or settles them (see classify.py)."""


class RateBudgetUnavailable(DeliveryError):
    """The shared rate budget (PostgreSQL or Redis) could not be reached: the run stops.

    Raised before a request leaves, so the request was never sent; the run ends with nothing
    lost and the next run resumes from the cursor. Never answered by a private budget."""


class LeaseLost(RateBudgetUnavailable):
    """This process no longer owns its run (its lease expired, or another process took the
    run over): it stops before sending and writes nothing more to the run. Handled like a lost
    rate budget where a request was about to leave: never sent, never settled."""


class RunRefused(SyncError):
    """A run refused before sending anything (for example a delete cap)."""


class RunInProgress(RunRefused):
    """Another process holds the integration's unfinished run of this mode (its lease is
    live): this run read and sent nothing. What a scheduled run meets while a long one (a
    first load) is still going: a flow run ends "Skipped", the CLI exits with EX_TEMPFAIL."""


SKIPPED = "skipped"
"""The one key of a flow's result for a RunInProgress: its message."""


class RunStopped(RateBudgetUnavailable):
    """The run was asked to stop (an orchestrator's SIGTERM, `run.stop`). No request leaves
    after that; those in flight are settled, those that never left are taken out of the
    journal, and the run is left resumable (its lease released). Handled like a lost rate
    budget where a request was about to leave: never sent, never settled."""


class StateUnavailable(SyncError):
    """engage-sync's state database could not be reached or written (a lost connection, a
    server stopped or restarting, a full disk under a SQLite file): `state.outage` names it,
    never its password. The run stops where it was and writes nothing more (the loop lets this
    pass its error handlers, which would write); the next run resumes it as after a crash."""


NOT_THE_RUNS_FAILURE = (LeaseLost, RunStopped, StateUnavailable)
"""Errors that end a run's attempt without being its failure: another process owns the run
now, it was asked to stop, or the state database was lost. Nothing records them against the
run (that would write where it must not), and a caller running several runs stops at them."""
