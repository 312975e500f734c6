"""The spend cap: a run whose predicted data points pass `max_data_points` (per run) or the
workspace's `max_data_points_per_day` stops before its first request.

The prediction is the dry run of the run's window (`run/dry_run.py`), read only when a cap is
set: it costs one more read of the window. A partitioned run is predicted and reserved once,
for the whole run. `--allow-points N` lets one run of at most N points through both caps (its
points still count toward the day).

Invariants:
- the check runs after the key check and the schema guard and before the first request; a
  refusal is a ConfigError (a `config_error` record, one line naming the prediction and the cap);
- the daily reservation is atomic in the state database (`state/spend.py`): of two processes
  that would together pass the cap, one runs and the other stops;
- every finished run's billed points count toward its workspace's day, capped or not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from engage_sync.config.integration import Integration
from engage_sync.errors import ConfigError
from engage_sync.read.plan import RunPlan
from engage_sync.run.dry_run import dry_run
from engage_sync.state.store import StateStore


@dataclass(frozen=True)
class Reservation:
    """Points a run reserved on its workspace's day (0 without a daily cap)."""

    workspace: str
    day: str
    points: int


def reserve(plan: RunPlan, engine: Engine, state: StateStore,
            clock: Callable[[], datetime]) -> Reservation:
    """Predict and reserve the run's points, or raise ConfigError naming prediction and cap."""
    integration, options = plan.integration, plan.options
    workspace, day = workspace_of(integration), clock().date().isoformat()
    per_run, per_day = integration.max_data_points, integration.max_data_points_per_day
    if per_run is None and per_day is None:
        return Reservation(workspace, day, 0)
    predicted = dry_run(plan.with_options(replace(options, dry_run=True)), engine, state,
                        clock=clock).points
    allowed = options.allow_points or 0
    if per_run is not None and predicted > max(per_run, allowed):
        raise _refused(integration, predicted, f"max_data_points ({per_run:,})", "max_data_points")
    if per_day is None:
        return Reservation(workspace, day, 0)
    cap = None if predicted <= allowed else per_day
    done, taken = state.reserve_points(workspace, day, predicted, cap)
    if not done:
        raise _refused(integration, predicted, f"max_data_points_per_day ({per_day:,}) of the "
                       f"workspace, of which {taken:,} are taken on {day} (UTC)",
                       "max_data_points_per_day")
    return Reservation(workspace, day, predicted)


def settle(state: StateStore, reservation: Reservation, record: dict[str, Any]) -> None:
    """The finished run's billed points replace its reservation on the workspace's day."""
    billed = int(record.get("data_points_sent") or 0)
    if billed or reservation.points:
        state.settle_points(reservation.workspace, reservation.day, reservation.points, billed)


def workspace_of(integration: Integration) -> str:
    """The workspace a run bills: its service's base URL (expanded), without a trailing /."""
    return integration.service.base_url.rstrip("/")


def _refused(integration: Integration, predicted: int, cap: str, key: str) -> ConfigError:
    return ConfigError(
        f"integration {integration.name}: the run would bill {predicted:,} data points "
        f"(predicted by a dry run of its window), above {cap}; nothing was sent. Check the "
        f"source, then raise {key} or rerun with --allow-points {predicted}")
