"""A run's OpenLineage events (openlineage-python): START once it knows its integration, then
COMPLETE, or FAIL when its record says `error` / `config_error` or the run raised. Every
COMPLETE and FAIL carries the record's counts: a run that raised is told with the record it
left (`lineage.observe` finds it), so a run stopped by a 401 shows what it read and sent.

Input: the warehouse table; output: the service's endpoint (`lineage_names`). The run facet
`engageSync` carries the record's counts (rows read, synced, rejected, failed, in doubt,
unchanged; data points billed and saved; `EngageSyncRunFacet.json` is its schema). An event
never holds a credential: namespaces are built without them, and a FAIL's message is scrubbed of
the warehouse password, connect_args values and the service key. Emitting never fails a sync:
a transport error is logged (without the event) and the run goes on.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any, ClassVar

import attr
import sqlalchemy as sa
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    RunFacet,
    error_message_run,
    input_statistics_input_dataset,
    job_type_job,
    output_statistics_output_dataset,
    processing_engine_run,
)
from openlineage.client.uuid import generate_new_uuid

from engage_sync import __version__
from engage_sync.adapters import lineage_names as names
from engage_sync.adapters.failures import one_line
from engage_sync.config import secrets
from engage_sync.config.integration import Integration
from engage_sync.read.plan import RunPlan

log = logging.getLogger("engage_sync.lineage")

PRODUCER = f"urn:engage-sync:{__version__}"
FACET_SCHEMA = f"urn:engage-sync:{__version__}:EngageSyncRunFacet.json#/$defs/EngageSyncRunFacet"
FAILED_STATUSES = ("error", "config_error")
NAMESPACE_ENV = "OPENLINEAGE_NAMESPACE"  # the job namespace, as OpenLineage's integrations read it


@attr.define
class EngageSyncRunFacet(RunFacet):
    """The run's record in numbers: every row read is synced, failed (rejects included),
    in doubt or unchanged; data points billed (sent) and saved by the field diff."""

    runId: str | None = attr.field(default=None)
    jobStatus: str | None = attr.field(default=None)
    mode: str | None = attr.field(default=None)
    rowsRead: int = attr.field(default=0)
    rowsSynced: int = attr.field(default=0)
    rowsRejected: int = attr.field(default=0)
    rowsFailed: int = attr.field(default=0)
    rowsInDoubt: int = attr.field(default=0)
    rowsUnchanged: int = attr.field(default=0)
    dataPointsBilled: int = attr.field(default=0)
    dataPointsSaved: int = attr.field(default=0)
    rowsLeft: int = attr.field(default=0)
    _additional_skip_redact: ClassVar[list[str]] = ["runId", "jobStatus", "mode"]

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA


def stats_facet(record: dict[str, Any]) -> EngageSyncRunFacet:
    """The record's counts (an extended status record, `status.record`)."""
    def n(key: str) -> int:
        return int(record.get(key) or 0)

    return EngageSyncRunFacet(
        runId=record.get("run_id"), jobStatus=record.get("job_status"), mode=record.get("mode"),
        rowsRead=n("rows_read"), rowsSynced=n("rows_synced"), rowsRejected=n("rows_rejected"),
        rowsFailed=n("rows_failed_with_errors"), rowsInDoubt=n("rows_in_doubt"),
        rowsUnchanged=n("rows_unchanged"), dataPointsBilled=n("data_points_sent"),
        dataPointsSaved=n("data_points_saved"), rowsLeft=n("rows_left"), producer=PRODUCER)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _default_schema(engine: sa.Engine) -> str | None:
    """The connection's default schema (PostgreSQL's search_path, DuckDB's `main`); None when
    the warehouse cannot be reached (the run then fails on its own)."""
    try:
        return engine.dialect.default_schema_name or sa.inspect(engine).default_schema_name
    except Exception:
        return None


class RunLineage:
    """One run's events; `start` at most once, then `complete` or `fail` once."""

    def __init__(self, client: OpenLineageClient, job_name: str) -> None:
        self.client = client
        self.namespace = os.environ.get(NAMESPACE_ENV) or "engage-sync"
        self.job_name = job_name
        self.integration_name = job_name
        self.run_id = str(generate_new_uuid())
        self.inputs: list[InputDataset] = []
        self.outputs: list[OutputDataset] = []
        self.secrets: list[str | None] = []
        self.started = False
        self.ended = False

    def named(self, name: str) -> None:
        """The integration's name, once its file is read (FAIL finds its record by it)."""
        self.integration_name = name

    def start(self, plan: RunPlan, engine: sa.Engine) -> None:
        """START with the run's datasets (the table, the endpoint)."""
        integration = plan.integration
        self.job_name = integration.name
        url = engine.url
        self.secrets = [url.password, os.environ.get(integration.service.api_key_env),
                        *_connect_arg_values(integration)]
        if integration.source.table:
            self.inputs = [InputDataset(
                namespace=names.warehouse_namespace(url),
                name=names.warehouse_dataset_name(url, integration.source.table,
                                                  integration.source.schema_name,
                                                  _default_schema(engine)))]
        self.outputs = [OutputDataset(
            namespace=names.service_namespace(integration.service.base_url),
            name=plan.kind.endpoint(integration))]
        self._emit(RunState.START, {})

    def finish(self, record: dict[str, Any] | None) -> None:
        """COMPLETE, or FAIL when the record says the run failed."""
        if record is None:  # a dry run: nothing moved
            return
        self._with_counts(record)
        failed = record.get("job_status") in FAILED_STATUSES
        facets: dict[str, RunFacet] = {"engageSync": stats_facet(record)}
        if failed:
            facets["errorMessage"] = self._error(str(record.get("message") or "sync failed"))
        self._emit(RunState.FAIL if failed else RunState.COMPLETE, facets)

    def fail(self, exc: BaseException, aborted: bool = False,
             record: dict[str, Any] | None = None) -> None:
        """FAIL (ABORT when `aborted`) for a run that raised, with the counts of the `record`
        it left (as `finish`'s); START first if it never started."""
        if not self.started:
            self._emit(RunState.START, {})
        facets: dict[str, RunFacet] = {}
        if record is not None:
            self._with_counts(record)
            facets["engageSync"] = stats_facet(record)
        facets["errorMessage"] = self._error(one_line(exc, self.job_name))
        self._emit(RunState.ABORT if aborted else RunState.FAIL, facets)

    def _with_counts(self, record: dict[str, Any]) -> None:
        read, synced = int(record.get("rows_read") or 0), int(record.get("rows_synced") or 0)
        self.inputs = [attr.evolve(d, inputFacets={
            "inputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                rowCount=read, producer=PRODUCER)}) for d in self.inputs]
        self.outputs = [attr.evolve(d, outputFacets={
            "outputStatistics": output_statistics_output_dataset.
            OutputStatisticsOutputDatasetFacet(rowCount=synced, producer=PRODUCER)})
            for d in self.outputs]

    def _error(self, message: str) -> error_message_run.ErrorMessageRunFacet:
        return error_message_run.ErrorMessageRunFacet(
            message=names.scrub(message, self.secrets), programmingLanguage="python",
            producer=PRODUCER)

    def _emit(self, state: RunState, facets: dict[str, RunFacet]) -> None:
        if self.ended:
            return
        self.started = True
        self.ended = state != RunState.START
        engine = processing_engine_run.ProcessingEngineRunFacet(
            version=__version__, name="engage-sync", producer=PRODUCER)
        job_type = job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="ENGAGE_SYNC", jobType="SYNC", producer=PRODUCER)
        event = RunEvent(
            eventType=state, eventTime=_now(), producer=PRODUCER,
            run=Run(runId=self.run_id, facets={"processing_engine": engine, **facets}),
            job=Job(namespace=self.namespace, name=self.job_name,
                    facets={"jobType": job_type}),
            inputs=self.inputs, outputs=self.outputs)
        try:
            self.client.emit(event)
        except Exception as exc:  # lineage never fails a sync
            log.warning("OpenLineage %s event of %s not sent: %s", state.value, self.job_name,
                        names.scrub(one_line(exc), self.secrets))


def _connect_arg_values(integration: Integration) -> list[str]:
    try:
        args = secrets.connect_args(integration.warehouse.connect_args, integration.name)
    except Exception:
        return []
    return [str(v) for v in _leaves(args)]


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def new_client() -> OpenLineageClient:
    """The client as OpenLineage's own configuration says (OPENLINEAGE_URL, OPENLINEAGE_CONFIG,
    OPENLINEAGE__TRANSPORT__*)."""
    return OpenLineageClient()
