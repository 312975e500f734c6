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


class SourceError(SyncError):
    """The warehouse could not be read (connection, missing table or column, bad query)."""


class DeliveryError(SyncError):
    """The service could not be reached or refused a request."""


class RetryableDeliveryError(DeliveryError):
    """Known not processed, or in doubt; safe to try again under the in-doubt policy."""


class FatalDeliveryError(DeliveryError):
    """The service refused the request for good (401, 403, 404, 413, 415, 400)."""


class RunRefused(SyncError):
    """A run refused before sending anything (for example a delete cap)."""
