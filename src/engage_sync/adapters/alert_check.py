"""The alert conditions evaluated for an integration, after each of its runs and on demand
(freshness, by the status server's watch: `adapters/freshness_watch.py`).

What holds is decided by `alerts/conditions.py` from the run figures in the state database;
whether it is a change is decided by the alert states kept there (`state/alert_states.py`),
so each alert is raised once and cleared once whichever process sees it; each change is then
delivered (`adapters/alert_delivery.py`).

Invariant: evaluating alerts never fails or changes a run: any failure is one warning line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from engage_sync.adapters.alert_delivery import Alert, delivery_for
from engage_sync.adapters.failures import after_the_run
from engage_sync.alerts import conditions
from engage_sync.alerts.conditions import Finding, RunFigures
from engage_sync.config.integration import Integration
from engage_sync.read.plan import RunPlan
from engage_sync.state.store import StateStore
from engage_sync.status.record import record

log = logging.getLogger("engage_sync.alerts")

Deliver = Callable[[Alert], None]
Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def evaluated_after(plan: RunPlan, store: StateStore, clock: Clock | None = None
                    ) -> Iterator[None]:
    """After the run inside ended or failed (not a dry run, nor another process's run), the
    integration's alerts are evaluated on its newest finished run."""
    def evaluate() -> None:
        if plan.integration.alerts is not None:
            after_run(plan.integration, store, clock=clock)

    with after_the_run(evaluate, plan.options.dry_run):
        yield


def figures_of(run: Mapping[str, Any]) -> RunFigures:
    """What the conditions read of a run row: rows read as its record counts them."""
    rec = record(dict(run))
    return RunFigures(str(run["run_id"]), str(run["job_status"]), str(run["mode"]),
                      int(rec["rows_read"]), int(rec["data_points_sent"]))


def after_run(integration: Integration, store: StateStore, *, clock: Clock | None = None,
              deliver: Deliver | None = None) -> None:
    """Volume, failed and (with `fresh_within`) freshness on the newest finished run, all
    at one `now`."""
    alerts = integration.alerts
    if alerts is None:
        return
    name = integration.name
    try:
        newest = store.finished_runs(name, 1)
        if not newest:
            return
        now = (clock or _now)()
        run = figures_of(newest[0])
        history = [figures_of(r) for r in store.finished_runs(
            name, conditions.HISTORY, before_seq=newest[0]["seq"], status="success",
            mode="incremental")]
        found = {"volume": conditions.volume(run, history, alerts.factor),
                 "failed": conditions.failed(run)}
        if alerts.fresh_within is not None:
            last, first = store.success_and_first(name)
            found["freshness"] = conditions.freshness(now, last, first, alerts.fresh_within)
        apply(store, name, found, deliver or delivery_for(name, alerts), now)
    except Exception as exc:
        log.warning("integration %s: alerts not evaluated (%s)", name, type(exc).__name__)


def check_freshness(integration: Integration, store: StateStore, now: datetime,
                    deliver: Deliver | None = None) -> None:
    """Freshness alone, for an integration that may not have run (the watch)."""
    alerts = integration.alerts
    if alerts is None or alerts.fresh_within is None:
        return
    last, first = store.success_and_first(integration.name)
    found = {"freshness": conditions.freshness(now, last, first, alerts.fresh_within)}
    apply(store, integration.name, found,
          deliver or delivery_for(integration.name, alerts), now)


def apply(store: StateStore, name: str, found: Mapping[str, Finding], deliver: Deliver,
          now: datetime) -> list[Alert]:
    """Each condition's change made in the state database and, when this call made it,
    delivered; the alerts delivered."""
    raised = store.raised_alerts(name)
    sent = []
    for condition, finding in found.items():
        change = conditions.transition(condition in raised, finding.holds)
        if change == "raised":
            made = store.raise_alert(name, condition, finding.figures, now)
        elif change == "cleared":
            made = store.clear_alert(name, condition)
        else:
            continue
        if made:
            alert = Alert(name, condition, change, finding.figures)
            deliver(alert)
            sent.append(alert)
    return sent
