"""The runs' records as Prometheus metrics, written by prometheus-client's own exposition.

Counters are sums over an integration's finished and running records (a partitioned run
counts once, as its parent's record; its partitions' own rows are left out), so after a run
each counter equals the sum of that field over the integration's records (`status.record`).
Each render builds its metrics from the totals it is given on a registry of its own: nothing
is kept between scrapes, and the process-wide default registry is never touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from engage_sync.status.record import failed_rows

COUNTERS = (
    ("rows_synced", "rows_synced", "Rows the service acknowledged."),
    ("rows_failed", "rows_failed_with_errors", "Rows that failed: rejected before sending, "
     "refused by the service, or failed after their request's retries."),
    ("rows_rejected", "rows_rejected", "Rows rejected before sending (bad values)."),
    ("rows_in_doubt", "rows_in_doubt", "Rows whose request may or may not have been processed."),
    ("rows_unchanged", "rows_unchanged", "Rows read with nothing changed, not sent."),
    ("rows_left", "rows_left", "Users who left the source, cleared or deleted."),
    ("data_points_sent", "data_points_sent", "Billed data points the service acknowledged."),
    ("data_points_saved", "data_points_saved", "Data points the field diff left unsent."),
    ("requests_sent", "requests_sent", "Requests sent to the service."),
)
"""(metric name without prefix and `_total`, record field, help text). No metric counts failed
rows without rejects: that is `rows_failed` less `rows_rejected`."""


class _Records(Collector):
    """The metric families of one set of totals (`RunRows.run_totals`)."""

    def __init__(self, totals: Iterable[Mapping[str, Any]]) -> None:
        self.rows = list(totals)

    def collect(self) -> Iterator[Metric]:
        runs = CounterMetricFamily("engage_sync_runs", "Runs recorded, by integration and status.",
                                   labels=["integration", "job_status"])
        sums: dict[str, dict[str, int]] = {}
        last: dict[str, datetime] = {}
        for r in self.rows:
            runs.add_metric([r["integration"], r["job_status"]], int(r["runs"]))
            totals = sums.setdefault(r["integration"], {})
            for _, field, _ in COUNTERS:
                totals[field] = totals.get(field, 0) + _field(r, field)
            finished = r.get("last_finish")
            if r["job_status"] in ("success", "partial") and finished is not None:
                last[r["integration"]] = max(finished, last.get(r["integration"], finished))
        yield runs
        for name, field, text in COUNTERS:
            family = CounterMetricFamily(f"engage_sync_{name}", text, labels=["integration"])
            for integration, totals in sorted(sums.items()):
                family.add_metric([integration], totals[field])
            yield family
        success = GaugeMetricFamily(
            "engage_sync_last_success_timestamp_seconds",
            "When the integration's last successful or partial run finished (Unix time).",
            labels=["integration"])
        for integration, at in sorted(last.items()):
            success.add_metric([integration], at.timestamp())
        yield success


def _field(totals: Mapping[str, Any], field: str) -> int:
    """A record field's sum from the run rows' sums: `rows_failed_with_errors` as the records
    count it (`failed_rows`: rejects included), any other as summed."""
    if field == "rows_failed_with_errors":
        return failed_rows(totals)
    return int(totals[field] or 0)


def render(totals: Iterable[Mapping[str, Any]]) -> str:
    """Totals per (integration, job_status) (`RunRows.run_totals`) → the exposition text."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Records(totals))
    return generate_latest(registry).decode()
