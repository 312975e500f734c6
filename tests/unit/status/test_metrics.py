"""The records as Prometheus text (pure): the format parses with Prometheus' own parser, the
counters are the sums of the records, and a label value cannot break the exposition."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from engage_sync.status.metrics import COUNTERS, render


def _totals(integration: str, status: str, runs: int, synced: int,
            finished: datetime | None = None) -> dict[str, object]:
    row: dict[str, object] = {column: 0 for _, column, _ in COUNTERS}
    return {**row, "integration": integration, "job_status": status, "runs": runs,
            "rows_synced": synced, "data_points_sent": synced * 5, "last_finish": finished}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_counters_are_the_sums_of_the_records_and_parse() -> None:
    t1, t2 = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)
    text = render([_totals("users", "success", 2, 300, t1),
                   _totals("users", "partial", 1, 40, t2),
                   _totals("users", "error", 1, 0, datetime(2026, 11, 3, tzinfo=UTC)),
                   _totals("events", "running", 1, 7)])
    got = _samples(text)
    assert got[("engage_sync_runs_total", (("integration", "users"),
                                           ("job_status", "success")))] == 2
    assert got[("engage_sync_rows_synced_total", (("integration", "users"),))] == 340
    assert got[("engage_sync_data_points_sent_total", (("integration", "users"),))] == 1700
    assert got[("engage_sync_rows_synced_total", (("integration", "events"),))] == 7
    # the last success is the partial run's finish, not the later error's; none for events
    assert got[("engage_sync_last_success_timestamp_seconds",
                (("integration", "users"),))] == t2.timestamp()
    assert ("engage_sync_last_success_timestamp_seconds",
            (("integration", "events"),)) not in got


def test_a_label_value_is_escaped() -> None:
    text = render([_totals('we"ird\\name\n', "success", 1, 1)])
    got = _samples(text)
    assert got[("engage_sync_rows_synced_total", (("integration", 'we"ird\\name\n'),))] == 1


def test_each_render_is_its_own_and_the_default_registry_is_untouched() -> None:
    """Nothing is kept between scrapes: a second render of other totals shows only them, and
    the process-wide registry (which a Prefect worker may expose) holds no engage_sync metric."""
    from prometheus_client import REGISTRY

    render([_totals("users", "success", 1, 10)])
    got = _samples(render([_totals("events", "success", 1, 3)]))
    assert {labels for name, labels in got if name == "engage_sync_rows_synced_total"} == {
        (("integration", "events"),)}
    assert not [m for m in REGISTRY.collect() if m.name.startswith("engage_sync")]


def test_rows_failed_is_the_records_rows_failed_with_errors_rejects_included() -> None:
    """A run row keeps its rejects apart from its failed rows; the records add them (as the
    service's job_sync_status does), and so does the metric: one definition of failed."""
    from engage_sync.status.record import record

    run_row = {"sync_start_time": None, "sync_finish_time": None, "run_id": "r",
               "last_timestamp_synced": None, "mode": "incremental"}
    runs = [{**_totals("users", "partial", 1, 10), **run_row, "rows_failed_with_errors": 3,
             "rows_rejected": 2},
            {**_totals("users", "error", 1, 0), **run_row, "rows_failed_with_errors": 0,
             "rows_rejected": 4}]
    got = _samples(render(runs))  # one run per status: its totals are its run row
    assert got[("engage_sync_rows_failed_total", (("integration", "users"),))] == sum(
        record(r)["rows_failed_with_errors"] for r in runs) == 9
    assert got[("engage_sync_rows_rejected_total", (("integration", "users"),))] == 6
