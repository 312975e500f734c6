"""`engage-sync backfill`: re-send the rows whose cursor falls in a range, one flow run per chunk.

Invariants:
- the range [start, end) is cut into chunks that neither overlap nor leave a gap: each chunk is
  `start <= UPDATED_AT < end`, its end the next chunk's start (the pipeline reads a backfill's
  range half-open);
- each chunk is one flow run of a deployment, created with an idempotency key made of the
  integration, the chunk bounds and a hash of the options, so a repeated command creates no run
  for a chunk that has one: it waits for it, or inspects how it ended;
- chunks run one after another, so an interrupted backfill resumes at its first chunk not
  completed: a crashed or cancelled chunk run is set back to Scheduled (the same run, not a new
  one) and the pipeline resumes that range's unfinished run from the state database;
- the pipeline runs a chunk with mode `backfill`: bulk header set, the incremental cursor never
  moved, events already acknowledged not sent again unless `resend_events`.
Executing the runs is the deployment's job (`deployments/serve.py` or a worker); this module
creates them and watches them.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast
from uuid import UUID

from engage_sync.config.durations import parse_duration
from engage_sync.errors import ConfigError, SyncError

MAX_CHUNKS = 10_000
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TERMINAL_OK = "COMPLETED"
RESCHEDULE = ("CRASHED", "CANCELLED")


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows with start <= UPDATED_AT < end (both UTC)."""

    start: datetime
    end: datetime

    def label(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()})"


def parse_bound(text: str, *, is_end: bool) -> datetime:
    """'2024-01-01' or an ISO datetime → an aware UTC datetime. The range is half-open, so an end
    given as a date means the next midnight (the whole day is included) and an end given as a
    datetime is excluded; naive datetimes are UTC. Raises ConfigError."""
    try:
        if _DATE.match(text):
            day = datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=UTC)
            return day + timedelta(days=1) if is_end else day
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"{text!r} is not a date (2024-01-31) or datetime "
                          f"(2024-01-31T12:00:00Z)") from exc
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def plan(start: datetime, end: datetime, chunk: timedelta | str) -> list[Chunk]:
    """The chunks covering [start, end), each at most `chunk` long. Raises ConfigError."""
    size = parse_duration(chunk) if isinstance(chunk, str) else chunk
    if size < timedelta(seconds=1):
        raise ConfigError(f"chunk {chunk!r} is too small; use at least 1s (e.g. 1h, 1d, 7d)")
    if end <= start:
        raise ConfigError(f"--end {end.isoformat()} is not after --start {start.isoformat()}")
    count = -(-(end - start) // size)  # ceiling division of timedeltas
    if count > MAX_CHUNKS:
        raise ConfigError(f"{count} chunks is too many (at most {MAX_CHUNKS}); choose a larger "
                          f"--chunk")
    return [Chunk(start + k * size, min(start + (k + 1) * size, end)) for k in range(count)]


def options_hash(resend_events: bool, label: str | None, send_whole: bool = False) -> str:
    """What tells one set of chunk runs from another (`send_whole` only when set, so the
    sets made before it existed keep their hash)."""
    options: dict[str, Any] = {"resend_events": resend_events, "label": label or ""}
    if send_whole:
        options["send_whole"] = True
    blob = json.dumps(options, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def idempotency_key(integration: str, chunk: Chunk, opts: str) -> str:
    return (f"engage-sync-backfill:{integration}:{chunk.start.isoformat()}:"
            f"{chunk.end.isoformat()}:{opts}")


def run_tag(integration: str, opts: str) -> str:
    return f"backfill:{integration}:{opts}"


def parameters(chunk: Chunk, resend_events: bool, partitions: int | None = None,
               send_whole: bool = False) -> dict[str, Any]:
    """The flow parameters of one chunk run (the deployment supplies the integration);
    `partitions` and `send_whole` only when given (else the integration's own, and the
    diff)."""
    params: dict[str, Any] = {"mode": "backfill", "start": chunk.start.isoformat(),
                              "end": chunk.end.isoformat(), "dry_run": False,
                              "resend_events": resend_events}
    if partitions is not None:
        params["partitions"] = partitions
    if send_whole:
        params["send_whole"] = True
    return params


@dataclass
class ChunkResult:
    chunk: Chunk
    flow_run_id: UUID | None = None
    created: bool = False
    state: str = "PENDING"
    rows_synced: int = 0
    message: str = ""


@dataclass
class Summary:
    integration: str
    deployment: str
    chunks: list[ChunkResult] = field(default_factory=list)
    stopped: str | None = None

    @property
    def created(self) -> int:
        return sum(1 for c in self.chunks if c.created)

    @property
    def done(self) -> int:
        return sum(1 for c in self.chunks if c.state == TERMINAL_OK)

    @property
    def rows_synced(self) -> int:
        return sum(c.rows_synced for c in self.chunks)

    def as_dict(self) -> dict[str, Any]:
        return {"integration": self.integration, "deployment": self.deployment,
                "chunks": len(self.chunks), "chunks_done": self.done,
                "runs_created": self.created, "rows_synced": self.rows_synced,
                "stopped": self.stopped,
                "runs": [{"chunk": c.chunk.label(), "flow_run_id": str(c.flow_run_id or ""),
                          "created": c.created, "state": c.state, "rows_synced": c.rows_synced,
                          **({"message": c.message} if c.message else {})}
                         for c in self.chunks]}


def _rows_synced(client: Any, flow_run_id: UUID) -> int:
    """rows_synced of the status record artifact the chunk run left (0 if none)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
        flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])), limit=50)
    total = 0
    for art in artifacts:
        if not str(art.key or "").startswith("sync-status-"):
            continue
        data = json.loads(art.data) if isinstance(art.data, str) else art.data
        for row in data if isinstance(data, list) else []:
            total += int(row.get("rows_synced") or 0)
    return total


def _existing_runs(client: Any, deployment_id: UUID, tag: str) -> dict[str, Any]:
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    found: dict[str, Any] = {}
    offset = 0
    while True:  # paged: a long backfill has many chunk runs
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[tag])),
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=200, offset=offset)
        found.update((r.idempotency_key, r) for r in runs if r.idempotency_key)
        if len(runs) < 200:
            return found
        offset += len(runs)


def run_backfill(
    integration: str,
    chunks: list[Chunk],
    *,
    deployment: str,
    resend_events: bool = False,
    label: str | None = None,
    retry_failed: bool = False,
    chunk_timeout: float = 3600.0,
    poll: float = 2.0,
    report: Callable[[str], None] = print,
    on_chunk: Callable[[ChunkResult], None] | None = None,
    partitions: int | None = None,
    send_whole: bool = False,
) -> Summary:
    """Create (once) and watch one flow run of `deployment` per chunk, in order. Stops at a
    failed chunk (unless `retry_failed`) or one still unfinished after `chunk_timeout`
    seconds; a repeat of the command picks up there. Raises SyncError when the deployment is
    unknown."""
    from prefect.client.orchestration import get_client

    opts = options_hash(resend_events, label, send_whole)
    tag = run_tag(integration, opts)
    summary = Summary(integration, deployment)
    with get_client(sync_client=True) as client:
        dep = _deployment(client, deployment)
        existing = _existing_runs(client, dep.id, tag)
        for n, chunk in enumerate(chunks, 1):
            key = idempotency_key(integration, chunk, opts)
            result = ChunkResult(chunk)
            summary.chunks.append(result)
            run = existing.get(key)
            if run is None:
                run = _start(deployment, integration, chunk, key, tag,
                             parameters(chunk, resend_events, partitions, send_whole))
                result.created = True
            result.flow_run_id = run.id
            _watch(client, result, retry_failed=retry_failed, chunk_timeout=chunk_timeout,
                   poll=poll, report=report,
                   name=f"chunk {n}/{len(chunks)} {chunk.label()}: run {run.id}")
            report(f"chunk {n}/{len(chunks)} {chunk.label()}: {result.state.lower()}"
                   f"{' (new run)' if result.created else ''}, {result.rows_synced} rows synced; "
                   f"{summary.done}/{len(chunks)} chunks done, {summary.rows_synced} rows synced")
            if on_chunk is not None:
                on_chunk(result)
            if result.state != TERMINAL_OK:
                summary.stopped = _stop_reason(result)
                break
    return summary


def _start(deployment: str, integration: str, chunk: Chunk, key: str, tag: str,
           params: dict[str, Any]) -> Any:
    """A new flow run of the chunk (its idempotency key makes a repeat a no-op)."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment

    return cast(FlowRun, run_deployment(
        deployment, parameters=params, idempotency_key=key, timeout=0,
        tags=[tag, "backfill"], as_subflow=False,
        flow_run_name=f"{integration}-backfill-{chunk.start:%Y%m%dT%H%M%S}"))


def _deployment(client: Any, name: str) -> Any:
    """The deployment named `name`; SyncError saying how to serve it when there is none."""
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name(name)
    except ObjectNotFound as exc:
        raise SyncError(
            f"no deployment '{name}': serve it (python deployments/serve.py "
            f"config/) or deploy it (prefect deploy --all), or name another with "
            f"--deployment") from exc


def _watch(client: Any, result: ChunkResult, *, retry_failed: bool, chunk_timeout: float,
           poll: float, report: Callable[[str], None], name: str) -> None:
    """Poll a chunk's flow run until it completes, fails, or `chunk_timeout` passes, filling
    `result`. A crashed or cancelled run (or a failed one, with `retry_failed`) is set back to
    Scheduled once, and reported under `name`."""
    from prefect.states import Scheduled

    rescheduled = False
    deadline = time.monotonic() + chunk_timeout
    while True:
        run = client.read_flow_run(result.flow_run_id)
        state = run.state.type.value if run.state else "PENDING"
        result.state, result.message = state, (run.state.message or "") if run.state else ""
        if state == TERMINAL_OK:
            result.rows_synced = _rows_synced(client, run.id)
            return
        if state in RESCHEDULE or (state == "FAILED" and retry_failed):
            if rescheduled:
                return
            report(f"{name} {state.lower()}; scheduled again")
            client.set_flow_run_state(run.id, Scheduled(), force=True)
            rescheduled = True
        elif state == "FAILED":
            return
        if time.monotonic() > deadline:
            return
        time.sleep(poll)


def _stop_reason(result: ChunkResult) -> str:
    why = f"chunk {result.chunk.label()} is {result.state.lower()}"
    if result.message:
        why += f": {result.message}"
    hint = " (add --retry-failed to run it again)" if result.state == "FAILED" else ""
    return f"{why}; run the same command again to resume{hint}"


def dry_run(path: str, chunks: list[Chunk], *, resend_events: bool = False,
            state_url: str | None = None, report: Callable[[str], None] = print,
            send_whole: bool = False) -> list[dict[str, Any]]:
    """What each chunk's run would do, with the options its flow run is given (`parameters`):
    rows read (rows with start <= cursor < end, less the events incremental runs sent unless
    `resend_events`; rejects and rows unchanged included, as its record counts them),
    requests, and data points billed and saved (diffed against the field record as it is now,
    or whole with `send_whole`). Nothing sent, no flow run created."""
    from engage_sync.adapters.wiring import open_state, sync_file
    from engage_sync.config.run_options import run_options

    store = open_state(state_url)
    out = []
    for n, chunk in enumerate(chunks, 1):
        outcome = sync_file(path, store=store, options=run_options(
            "backfill", chunk.start, chunk.end, True, resend_events, send_whole=send_whole))
        d = outcome.dry_run
        assert d is not None
        out.append({"chunk": chunk.label(), "rows_read": d.rows_read,
                    "rows_unchanged": d.unchanged, "rows_rejected": len(d.rejects),
                    "requests": d.requests, "data_points_sent": d.points,
                    "data_points_saved": d.saved})
        report(f"chunk {n}/{len(chunks)} {chunk.label()}: {d.rows_read} rows read "
               f"({d.unchanged} unchanged, {len(d.rejects)} rejected), {d.requests} requests, "
               f"{d.points} data points ({d.saved} saved)")
    return out


DRY_RUN_TOTALS = ("rows_read", "rows_unchanged", "rows_rejected", "requests",
                  "data_points_sent", "data_points_saved")


def dry_run_totals(chunks: list[dict[str, Any]]) -> dict[str, int]:
    """The chunks' counts summed, as the backfill's runs would add up."""
    return {key: sum(int(c[key]) for c in chunks) for key in DRY_RUN_TOTALS}
