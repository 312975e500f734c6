"""The runs' records as Prometheus metrics (text exposition format 0.0.4). Pure.

Counters are sums over an integration's finished and running records (a partitioned run
counts once, as its parent's record; its partitions' own rows are left out), so after a run
each counter equals the sum of that field over the integration's records. Label values are
escaped as the format says (backslash, double quote, newline); integration names hold none of
them, but a text never breaks the exposition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

COUNTERS = (
    ("rows_synced", "rows_synced", "Rows the service acknowledged."),
    ("rows_failed", "rows_failed_with_errors", "Rows that failed (the service refused them, or "
     "their request failed after its retries), rejects not included."),
    ("rows_rejected", "rows_rejected", "Rows rejected before sending (bad values)."),
    ("rows_in_doubt", "rows_in_doubt", "Rows whose request may or may not have been processed."),
    ("rows_unchanged", "rows_unchanged", "Rows read with nothing changed, not sent."),
    ("data_points_sent", "data_points_sent", "Billed data points the service acknowledged."),
    ("data_points_saved", "data_points_saved", "Data points the field diff left unsent."),
    ("requests_sent", "requests_sent", "Requests sent to the service."),
)
"""(metric name without prefix and `_total`, run column, help text)."""


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def render(totals: Iterable[Mapping[str, Any]]) -> str:
    """Totals per (integration, job_status) (`RunRows.run_totals`) → the exposition text."""
    rows = list(totals)
    lines = ["# HELP engage_sync_runs_total Runs recorded, by integration and status.",
             "# TYPE engage_sync_runs_total counter"]
    lines += [f'engage_sync_runs_total{{integration="{_label(r["integration"])}",'
              f'job_status="{_label(r["job_status"])}"}} {int(r["runs"])}' for r in rows]
    by_integration: dict[str, dict[str, float]] = {}
    last: dict[str, datetime] = {}
    for r in rows:
        sums = by_integration.setdefault(r["integration"], {})
        for _, column, _ in COUNTERS:
            sums[column] = sums.get(column, 0) + int(r[column] or 0)
        finished = r.get("last_finish")
        if r["job_status"] in ("success", "partial") and finished is not None:
            last[r["integration"]] = max(finished, last.get(r["integration"], finished))
    for name, column, text in COUNTERS:
        metric = f"engage_sync_{name}_total"
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} counter"]
        lines += [f'{metric}{{integration="{_label(i)}"}} {_number(sums[column])}'
                  for i, sums in sorted(by_integration.items())]
    lines += ["# HELP engage_sync_last_success_timestamp_seconds When the integration's last "
              "successful or partial run finished (Unix time).",
              "# TYPE engage_sync_last_success_timestamp_seconds gauge"]
    lines += [f'engage_sync_last_success_timestamp_seconds{{integration="{_label(i)}"}} '
              f"{_number(t.timestamp())}" for i, t in sorted(last.items())]
    return "\n".join(lines) + "\n"
