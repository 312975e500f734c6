"""Alerts delivered: a Prefect event, and a POST to the integration's webhook when it has one.

The event is `engage-sync.alert.<condition>.raised` (or `.cleared`) on the resource
`engage-sync.integration.<name>`, so a Prefect automation can notify on it; the webhook gets a
Slack-compatible body (`text`, and `blocks` with the figures as fields) holding the
integration, the figures and the link of its status page (ENGAGE_SYNC_STATUS_URL, the status
server's address as its users reach it, when set).

Invariants: an alert holds names and figures only, never a row's value; the webhook's URL
(`alerts.webhook_url`, a `${VAR}` reference) is expanded only to send, and is never logged nor
written anywhere; a failed delivery is one warning line and never fails a run. Prefect is
imported only where it already is (a flow run) or where PREFECT_API_URL names a server, so a
`--no-prefect` run never loads it for an alert.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from engage_sync.config.alerts import Alerts
from engage_sync.config.secrets import expand
from engage_sync.errors import ConfigError

log = logging.getLogger("engage_sync.alerts")

STATUS_URL_ENV = "ENGAGE_SYNC_STATUS_URL"
WEBHOOK_TIMEOUT = 10.0


@dataclass(frozen=True)
class Alert:
    """One change of one condition of one integration, with its figures."""

    integration: str
    condition: str
    change: str
    figures: Mapping[str, object] = field(default_factory=dict)

    @property
    def event(self) -> str:
        return f"engage-sync.alert.{self.condition}.{self.change}"


def resource_id(integration: str) -> str:
    """The Prefect resource an integration's alert events are about."""
    return f"engage-sync.integration.{integration}"


def status_link(integration: str, env: Mapping[str, str] | None = None) -> str | None:
    """The integration's status page on the status server, when its address is set."""
    base = (os.environ if env is None else env).get(STATUS_URL_ENV, "").strip().rstrip("/")
    return f"{base}/cdi/integrations/{integration}/job_sync_status" if base else None


def _said(value: object) -> str:
    """A figure as people read it: 10,000 rather than 10000.0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.2f}"


def body(alert: Alert, link: str | None) -> dict[str, Any]:
    """The webhook's JSON: Slack's `text` (every client shows it) and `blocks`."""
    verb = "raised" if alert.change == "raised" else "cleared"
    text = f"engage-sync: {alert.condition} alert {verb} for integration {alert.integration}"
    if link:
        text += f" (status: {link})"
    fields = [{"type": "mrkdwn", "text": f"*{k}*\n{_said(v)}"}
              for k, v in alert.figures.items() if v is not None][:10]  # Slack's limit
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn",
                                                                 "text": text}}]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    return {"text": text, "blocks": blocks}


Post = Callable[..., httpx.Response]


@dataclass
class Delivery:
    """Delivers one integration's alerts (`deliver(alert)`), never raising."""

    integration: str
    webhook_ref: str | None = None
    prefect_events: bool = False
    post: Post = httpx.post

    def __call__(self, alert: Alert) -> None:
        link = status_link(alert.integration)
        if self.prefect_events:
            self._event(alert, link)
        if self.webhook_ref is not None:
            self._webhook(alert, link)

    def _event(self, alert: Alert, link: str | None) -> None:
        try:
            from prefect.events import emit_event

            emit_event(event=alert.event,
                       resource={"prefect.resource.id": resource_id(alert.integration),
                                 "prefect.resource.name": alert.integration},
                       payload={"integration": alert.integration, "condition": alert.condition,
                                "change": alert.change, "figures": dict(alert.figures),
                                "status_url": link})
        except Exception as exc:  # an alert never fails a run
            log.warning("integration %s: the %s alert was not sent as a Prefect event (%s)",
                        alert.integration, alert.condition, type(exc).__name__)

    def _webhook(self, alert: Alert, link: str | None) -> None:
        assert self.webhook_ref is not None
        try:
            url = expand(self.webhook_ref, integration=alert.integration,
                         key="alerts.webhook_url")
            answer = self.post(url, json=body(alert, link), timeout=WEBHOOK_TIMEOUT)
            problem = None if answer.is_success else f"HTTP {answer.status_code}"
        except ConfigError as exc:
            problem = str(exc)  # names the variable, never a value
        except Exception as exc:  # its text may hold the URL: its type only
            problem = type(exc).__name__
        if problem is not None:
            log.warning("integration %s: the alerts webhook (alerts.webhook_url) did not take "
                        "the %s alert: %s", alert.integration, alert.condition, problem)


def delivery_for(integration: str, alerts: Alerts,
                 env: Mapping[str, str] | None = None) -> Delivery:
    """The delivery of an integration's alerts: Prefect events where Prefect is in use."""
    env = os.environ if env is None else env
    events = "prefect" in sys.modules or bool(env.get("PREFECT_API_URL"))
    return Delivery(integration, alerts.webhook_url, events)
