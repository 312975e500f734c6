"""The `alerts:` section, in an integration file or for a whole folder (`_defaults.yaml`).

`factor` bounds the volume condition (a run's rows read or points billed above `factor` times,
or below one `factor`-th of, the median of the integration's recent successful runs);
`fresh_within` is the longest time without a successful run; `webhook_url` is where alerts are
also posted, and must be one `${VAR}` reference: the URL of a chat webhook is a secret, so it
lives in the environment and is expanded only when an alert is sent (`config/secrets.py`).

A folder's `_defaults.yaml` holds an `alerts:` section every integration file of the folder
takes; a file's own `alerts:` keys win key by key. No other key may be set for a folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from engage_sync.config.durations import Duration
from engage_sync.config.secrets import ENV_NAME
from engage_sync.config.sections import Frozen

FOLDER_DEFAULTS = "_defaults.yaml"
"""The file of a folder's settings for every integration file in it ('_': not an integration)."""
FOLDER_KEYS = ("alerts",)

_ONE_REFERENCE = re.compile(r"\$\{" + ENV_NAME + r"\}")


class Alerts(Frozen):
    """When a person hears about an integration (`alerts/conditions.py`)."""

    factor: float = Field(default=5.0, gt=1, le=1000)
    """A run whose rows read or points billed are more than `factor` times, or less than one
    `factor`-th of, the median of the recent successful runs raises `volume`."""
    fresh_within: Duration | None = None
    """No successful run for this long raises `freshness` (None: not watched)."""
    webhook_url: str | None = None
    """`${VAR}`: the environment variable holding the webhook's URL (a Slack-compatible
    incoming webhook); never the URL itself."""

    @field_validator("webhook_url")
    @classmethod
    def _from_env(cls, value: str | None) -> str | None:
        if value is not None and not _ONE_REFERENCE.fullmatch(value.strip()):
            raise ValueError("must be one ${VAR} reference, such as ${ALERTS_WEBHOOK_URL}: "
                             "export the webhook's URL in that variable; never write the URL "
                             "in the file (it is a secret)")
        return None if value is None else value.strip()

    @field_validator("fresh_within")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        if value is not None and value.total_seconds() <= 0:
            raise ValueError("must be a positive duration, like 30m or 2h")
        return value


def with_folder_defaults(raw: Any, defaults: dict[str, Any] | None) -> Any:
    """The file's mapping with the folder's `alerts` keys under its own (the file's win)."""
    if not isinstance(raw, dict) or not defaults or "alerts" not in defaults:
        return raw
    folder, own = defaults["alerts"], raw.get("alerts")
    if own is None:
        return {**raw, "alerts": folder}
    if isinstance(own, dict) and isinstance(folder, dict):
        return {**raw, "alerts": {**folder, **own}}
    return raw  # a file's malformed section is refused by its own validation


def folder_defaults_problem(raw: Any) -> str | None:
    """Why a folder's `_defaults.yaml` mapping cannot be used, naming the key, or None."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return "the file must hold a mapping with an 'alerts' section"
    unknown = sorted(str(k) for k in raw if k not in FOLDER_KEYS)
    if unknown:
        return (f"key '{unknown[0]}' cannot be set for a whole folder (only "
                f"{', '.join(repr(k) for k in FOLDER_KEYS)}); set it in each integration file")
    if not isinstance(raw.get("alerts"), dict):
        return "key 'alerts': must be a mapping (factor, fresh_within, webhook_url)"
    return None


def defaults_path(integration_file: Path) -> Path:
    return integration_file.parent / FOLDER_DEFAULTS
