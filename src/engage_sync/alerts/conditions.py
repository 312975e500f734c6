"""The alert conditions of an integration, and when an alert is raised or cleared.

Each condition looks at figures of runs (never a row's value) and answers True (it holds),
False (it does not) or None (it cannot tell: too few runs to compare with, a run of another
mode). `transition` turns the answer and whether the alert is raised now into one change:

- `volume`: an incremental run that ended `success` or `partial` read more than `factor` times,
  or less than one `factor`-th of, the median rows of the integration's recent successful
  incremental runs, or billed so many points (a median of 0 is not compared); told only after
  `MIN_HISTORY` such runs;
- `freshness`: no successful run within `fresh_within` of now (measured from the integration's
  first run when none succeeded; no run at all: cannot tell);
- `failed`: the last run ended `error`, `partial` or `config_error`.

Invariant: an alert is raised once when its condition starts to hold and cleared once when it
stops; an unknown answer changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median
from typing import Literal

Condition = Literal["volume", "freshness", "failed"]
CONDITIONS: tuple[Condition, ...] = ("volume", "freshness", "failed")
Change = Literal["raised", "cleared"]

MIN_HISTORY = 3
"""Successful runs a run's volume is compared with, at least."""
HISTORY = 10
"""Successful runs a run's volume is compared with, at most (the most recent)."""
FAILED_STATUSES = frozenset({"error", "partial", "config_error"})


@dataclass(frozen=True)
class RunFigures:
    """What the conditions read of one finished run."""

    run_id: str
    job_status: str
    mode: str
    rows_read: int
    points: int


@dataclass(frozen=True)
class Finding:
    """A condition's answer and the figures that tell why (numbers and names only)."""

    holds: bool | None
    figures: dict[str, object]


def transition(raised: bool, holds: bool | None) -> Change | None:
    """The change an answer makes to an alert raised (or not) now: once at each edge."""
    if holds is None or holds == raised:
        return None
    return "raised" if holds else "cleared"


def _past(value: int, typical: float, factor: float) -> str | None:
    if typical <= 0:
        return None
    if value > typical * factor:
        return "jump"
    if value * factor < typical:
        return "drop"
    return None


def volume(run: RunFigures, history: Sequence[RunFigures], factor: float) -> Finding:
    """`run` against the median of `history` (the recent successful incremental runs before
    it, newest first; at most `HISTORY` are used)."""
    if run.mode != "incremental" or run.job_status not in ("success", "partial"):
        return Finding(None, {})
    usable = [r for r in history if r.job_status == "success" and r.mode == "incremental"]
    usable = usable[:HISTORY]
    if len(usable) < MIN_HISTORY:
        return Finding(None, {"runs_compared": len(usable)})
    rows = float(median(r.rows_read for r in usable))
    points = float(median(r.points for r in usable))
    moves = {"rows_read": _past(run.rows_read, rows, factor),
             "points_billed": _past(run.points, points, factor)}
    figures: dict[str, object] = {
        "rows_read": run.rows_read, "rows_read_median": rows,
        "points_billed": run.points, "points_billed_median": points,
        "factor": factor, "runs_compared": len(usable), "run_id": run.run_id}
    figures.update({f"{k}_change": v for k, v in moves.items() if v is not None})
    return Finding(any(v is not None for v in moves.values()), figures)


def freshness(now: datetime, last_success: datetime | None, first_run: datetime | None,
              fresh_within: timedelta) -> Finding:
    """Whether the newest successful run (else the first run) is older than `fresh_within`."""
    since = last_success or first_run
    if since is None:
        return Finding(None, {})
    age = now - since
    return Finding(age > fresh_within, {
        "last_success": None if last_success is None else last_success.isoformat(),
        "seconds_since": round(age.total_seconds()),
        "fresh_within_seconds": round(fresh_within.total_seconds())})


def failed(run: RunFigures) -> Finding:
    """Whether `run` ended in error, partially or stopped by its configuration."""
    return Finding(run.job_status in FAILED_STATUSES,
                   {"job_status": run.job_status, "run_id": run.run_id})
