"""Sandbox settings: one frozen object, built once and passed to :func:`create_app`.

Invariants: every limit the spec or the facts give is a field with the real default, so a
test can shrink it; nothing here reads the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

LimitMode = Literal["total75", "per_array75", "total50"]
LIMIT_MODES: tuple[str, ...] = ("total75", "per_array75", "total50")


@dataclass(frozen=True)
class RateLimit:
    """A fixed window: at most ``limit`` requests per ``window_seconds``."""

    limit: int
    window_seconds: int


# Rate-limit groups. Figures from the spec (Limits) and the facts; the rest are documented
# choices: `custom_attributes` 1,000/min, `canvas_send` and `scim` the default 250,000/h,
# `alias_new` shares `identity` as the spec says.
DEFAULT_RATE_LIMITS: dict[str, RateLimit] = {
    "users_track": RateLimit(3000, 3),
    "subscription": RateLimit(5000, 60),
    "identity": RateLimit(20000, 60),
    "job_sync_status": RateLimit(100, 60),
    "default": RateLimit(250000, 3600),
    "canvas_send": RateLimit(250000, 3600),
    "custom_attributes": RateLimit(1000, 60),
    "preference_update": RateLimit(10, 60),
    "preference_list": RateLimit(1000, 60),
    "scim": RateLimit(250000, 3600),
}

MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class SandboxSettings:
    """Everything that shapes one sandbox instance.

    ``seed``: a path to a YAML file, an already parsed mapping, or None for the packaged demo
    seed. ``rate_limits`` overrides single groups of :data:`DEFAULT_RATE_LIMITS`.
    ``rate_limiting``: False disables 429s (headers are still sent), used by benchmarks.
    ``faults``: initial fault rules, in the JSON shape of ``POST /_sandbox/faults``.
    ``log_capacity``: the request log keeps the most recent N entries.
    """

    seed: str | Path | dict[str, Any] | None = None
    lean: bool = False
    limit_mode: LimitMode = "total75"
    max_body_bytes: int = MAX_BODY_BYTES
    rate_limits: dict[str, RateLimit] = field(default_factory=dict)
    rate_limiting: bool = True
    faults: list[dict[str, Any]] = field(default_factory=list)
    log_capacity: int = 100_000

    def __post_init__(self) -> None:
        if self.limit_mode not in LIMIT_MODES:
            raise ValueError(f"limit_mode must be one of {LIMIT_MODES}, got {self.limit_mode!r}")
        unknown = set(self.rate_limits) - set(DEFAULT_RATE_LIMITS)
        if unknown:
            raise ValueError(f"unknown rate-limit groups: {sorted(unknown)}")

    def rate_limit(self, group: str) -> RateLimit:
        """The effective limit of ``group`` (override, else default)."""
        return self.rate_limits.get(group) or DEFAULT_RATE_LIMITS[group]

    def object_limits(self) -> tuple[int | None, int | None]:
        """(total limit, per-array limit) of /users/track objects for ``limit_mode``."""
        if self.limit_mode == "per_array75":
            return None, 75
        if self.limit_mode == "total50":
            return 50, None
        return 75, None
