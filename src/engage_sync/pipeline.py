"""One run of one integration: window → extract → transform → batch → deliver → journal.

Invariants (DESIGN.md rules 1–5 and 7):
- the window is fixed when the run opens; a resumed run re-reads the same window from its
  progress and skips the ranges its journal already settled;
- a request is journaled before it leaves; the cursor moves only over the longest prefix of
  settled ranges (`Progress`);
- two requests that touch the same user are never in flight at once;
- every row read ends as synced, rejected, failed or in doubt.
No Prefect here: flows call `run_sync`.
"""

from __future__ import annotations

import logging
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
from sqlalchemy.engine import Engine

from engage_sync import kinds
from engage_sync.batching import Batch, Packer, TrackLimits, TrackPacker
from engage_sync.config import Integration
from engage_sync.deliver import Deliverer
from engage_sync.errors import ConfigError, RunRefused, SyncError
from engage_sync.extract import (
    Cursor,
    SourceSpec,
    Window,
    count_rows,
    sample_cursor,
    stream_batches,
)
from engage_sync.model import Item
from engage_sync.ranges import Ranges
from engage_sync.ratelimit import RateBudgets
from engage_sync.sender import REJECTED, Progress, RunContext, Segment, Sender, digest, stamp
from engage_sync.state import (
    JournalEntry,
    StateStore,
    decode_cursor,
    encode_cursor,
    owner_alive,
)
from engage_sync.status import job_status, record
from engage_sync.transform import transform_batch
from engage_sync.window import align, backfill_window, incremental_window

log = logging.getLogger("engage_sync.pipeline")

Mode = Literal["incremental", "backfill", "full_resync"]


class RowBatch:
    """One transformed Arrow batch: an outcome per row (an Item, a (key, reason) reject, or
    None for a row dropped as already sent) and the rows' cursors, built only when asked."""

    def __init__(self, columns: list[Any], num_rows: int) -> None:
        self.columns = columns
        self.outcomes: list[Item | tuple[str, str] | None] = [None] * num_rows
        self._all: list[Cursor] | None = None

    def cursor(self, k: int) -> Cursor:
        if self._all is not None:
            return self._all[k]
        return tuple(column[k].as_py() for column in self.columns)

    def cursors(self) -> list[Cursor]:
        if self._all is None:
            self._all = list(zip(*(c.to_pylist() for c in self.columns), strict=True))
        return self._all


@dataclass(frozen=True)
class RunOptions:
    """How to run. A backfill reads rows with start <= cursor < end, sends them with the bulk
    header, never moves the incremental cursor, and skips events and purchases that an
    incremental run already sent, unless `resend_events`."""

    mode: Mode = "incremental"
    dry_run: bool = False
    start: datetime | None = None
    end: datetime | None = None
    resend_events: bool = False
    allow_deletes: int | None = None

    @property
    def scope(self) -> str | None:
        """What makes a backfill run resumable: its range."""
        if self.mode != "backfill":
            return None
        return encode_cursor([self.start, self.end])


@dataclass
class Deps:
    """What a run needs from outside, passed in (tests hand in fakes or loopback servers)."""

    engine: Engine
    state: StateStore
    client: httpx.Client
    api_key: str
    budgets: RateBudgets = field(default_factory=RateBudgets)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    on_progress: Callable[[dict[str, int]], None] | None = None


@dataclass
class DryRun:
    rows: int = 0
    requests: int = 0
    rejects: list[tuple[str, str]] = field(default_factory=list)
    sample: list[bytes] = field(default_factory=list)


RATE_GROUP_OF_KIND = {"attributes": "users_track", "events": "users_track",
                      "purchases": "users_track", "subscriptions": "subscription"}
"""The service's rate-limit group of each kind; identity operations share "identity"."""


def source_spec(integration: Integration) -> SourceSpec:
    cols = [integration.cursor_column, *integration.key_columns, *data_columns(integration)]
    return SourceSpec(
        integration=integration.name,
        table=integration.source.table,
        schema=integration.source.schema_name,
        query=integration.source.query,
        cursor_column=integration.cursor_column,
        key_columns=integration.key_columns,
        columns=tuple(dict.fromkeys(cols)),
    )


def data_columns(integration: Integration) -> list[str]:
    """Columns the transform reads, in addition to the cursor and key columns."""
    if not kinds.is_track(integration):
        return kinds.columns(integration)
    cols = list(integration.identifier_columns)
    fmt = integration.payload_format
    if fmt is not None:
        return [*cols, fmt.payload_column]
    m = integration.mapping
    assert m is not None
    if integration.kind == "attributes":
        cols += list(m.attributes) + kinds.track_extra_columns(integration)
    elif integration.kind == "events" and m.event is not None:
        e = m.event
        cols += [c for c in (e.name_column, e.time, e.app_id) if c] + list(e.properties)
    elif m.purchase is not None:
        p = m.purchase
        cols += [c for c in (p.product_id, p.currency, p.price, p.quantity, p.time, p.app_id)
                 if c] + list(p.properties)
    return cols


def run_sync(integration: Integration, deps: Deps, options: RunOptions = RunOptions()
             ) -> dict[str, Any]:
    """Run (or resume) one sync and return its status record."""
    if options.dry_run:
        raise ValueError("use dry_run() for a dry run")
    return _Run(integration, deps, options).execute()


class _Run:
    def __init__(self, integration: Integration, deps: Deps, options: RunOptions) -> None:
        self.i = integration
        self.deps = deps
        self.options = options
        self.spec = source_spec(integration)
        self.limits = TrackLimits(
            objects_per_request=integration.service.limits.objects_per_request,
            per_array=integration.service.limits.per_array,
            max_body_bytes=integration.service.limits.max_body_bytes,
        )
        # only events and purchases are not idempotent: every other kind may be sent twice
        self.idempotent = integration.kind not in ("events", "purchases")
        self.resend_in_doubt = self.idempotent or integration.in_doubt == "resend"
        self.track = kinds.is_track(integration)
        self.lookback = integration.lookback if options.mode == "incremental" else None
        self.stored: Cursor | None = None  # the integration's cursor when the run opened
        self.crashed: set[int] = set()  # resumed, skip policy: requests in flight at the crash
        # a backfill of events skips what incremental runs sent or will send (rows above their
        # cursor), unless told to resend
        self.already_sent: Ranges | None = None
        self.incremental_cursor: Cursor | None = None
        if (options.mode == "backfill" and not self.idempotent
                and not options.resend_events):
            self.already_sent = Ranges(deps.state.settled_ranges(
                integration.name, ("incremental", "full_resync")))
            self.incremental_cursor = deps.state.cursor(integration.name)
        self.counts = {"read": 0, "requests": 0, "synced": 0, "failed": 0, "rejected": 0,
                       "in_doubt": 0}
        self.window_rows: int | None = None  # counted once when someone watches progress

    # opening -------------------------------------------------------------------------------
    def _window(self) -> tuple[str, Window, list[JournalEntry]]:
        state, name, mode = self.deps.state, self.i.name, self.options.mode
        self.stored = state.cursor(name)
        resumed = state.unfinished_run(name, mode, self.options.scope)
        if resumed is not None:
            run_id = resumed["run_id"]
            if owner_alive(resumed.get("owner")):
                raise RunRefused(
                    f"integration {name}: run {resumed['seq']} is still in progress in process "
                    f"{resumed['owner']}; wait for it (one run per integration at a time)")
            state.take_over(run_id)
            if self.resend_in_doubt:
                state.drop_pending(run_id)
            else:  # at most once: what was in flight at the crash is in doubt, not re-sent
                self.crashed = {e.req_no for e in state.journal_entries(run_id)
                                if e.state == "pending"}
                state.mark_pending_in_doubt(run_id)
            signpost = decode_cursor(resumed["signpost"])
            floor = decode_cursor(resumed["floor"])
            window = Window(
                start=decode_cursor(resumed["progress"]),
                signpost=signpost[0] if signpost else None,
                floor=floor[0] if floor else None,
                before=self._before(),
            )
            done = [e for e in state.journal_entries(run_id) if e.state != "pending"]
            log.info("integration %s: resuming run %s", name, run_id)
            return run_id, window, done
        window = self._new_window()
        run_id = state.open_run(name, mode, window.start, window.signpost, window.floor,
                                scope=self.options.scope)
        return run_id, window, []

    def _new_window(self) -> Window:
        now, lag = self.deps.clock(), self.i.settle_lag
        sample = sample_cursor(self.deps.engine, self.spec)
        if self.options.mode == "backfill":
            return backfill_window(self.options.start, self.options.end, now, lag, sample)
        stored = None if self.options.mode == "full_resync" else self.deps.state.cursor(self.i.name)
        window = incremental_window(stored, now, lag, self.lookback, sample)
        if window.floor is not None:  # lookback: acks below the re-read period are not needed
            self.deps.state.prune_acks(self.i.name, stamp(window.floor))
        return window

    def _check_delete_cap(self, window: Window) -> None:
        """Deletes are irreversible: refuse a run above `max_deletes` before sending anything,
        unless the run allows at least that many (`allow_deletes`)."""
        if self.i.kind != "deletes":
            return
        cap = self.i.max_deletes
        rows = count_rows(self.deps.engine, self.spec, window)
        allowed = max(cap, self.options.allow_deletes or 0)
        if rows > allowed:
            raise RunRefused(
                f"integration {self.i.name}: this run would delete {rows} users, more than "
                f"max_deletes ({cap}); nothing was sent. Check the source, then raise "
                f"max_deletes or rerun with --allow-deletes {rows}")

    def _before(self) -> Any:
        """A resumed backfill's exclusive end, in the source's cursor type."""
        end = self.options.end if self.options.mode == "backfill" else None
        if end is None:
            return None
        return align(end, sample_cursor(self.deps.engine, self.spec))

    # the run -------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        state = self.deps.state
        run_id, window, done = self._window()
        self.run_id = run_id
        try:
            self._check_delete_cap(window)
            self._count_window(window)
            self._stream(window, done)
        except SyncError as exc:
            state.finish_run(run_id, "config_error" if isinstance(exc, ConfigError) else "error",
                             message=str(exc))
            raise
        except BaseException:
            # KeyboardInterrupt, crashes: leave the run `running` so the next start resumes it.
            raise
        counts = state.counts(run_id)
        status = job_status(counts.synced, counts.failed, counts.rejected, counts.in_doubt)
        state.finish_run(run_id, status)
        return record(state.run(run_id))

    def _batches(
        self, window: Window,
        on_rejects: Callable[[list[tuple[str, str, str]]], None] | None = None,
    ) -> Iterator[RowBatch]:
        """The window's rows, one transformed Arrow batch at a time, in source order. Rejects
        of each batch go to `on_rejects` as (position, key, reason) before it is yielded, so
        they are durable before the cursor can pass them."""
        seq = 0
        names = [self.i.cursor_column, *self.i.key_columns]
        for batch in stream_batches(self.deps.engine, self.spec, window,
                                    self.i.extract_batch_rows):
            result = (transform_batch(self.i, batch, seq) if self.track
                      else kinds.transform(self.i, batch, seq))
            assert len(result.items) + len(result.rejects) == batch.num_rows, "a row was lost"
            rows = RowBatch([batch.column(n) for n in names], batch.num_rows)
            for item in result.items:
                rows.outcomes[item.seq - seq] = item
            for reject in result.rejects:
                rows.outcomes[reject.seq - seq] = (reject.key, reject.reason)
            if self.lookback and self.stored is not None:
                self._drop_acknowledged(rows.cursors(), rows.outcomes)
            if self.already_sent is not None:
                self._drop_incremental(rows.cursors(), rows.outcomes)
            if on_rejects is not None and result.rejects:
                rejects = [(k, o) for k, o in enumerate(rows.outcomes) if isinstance(o, tuple)]
                on_rejects([(encode_cursor(rows.cursor(k)) or "", o[0], o[1])
                            for k, o in rejects])
                if self.lookback:
                    self.deps.state.record_acks(self.i.name, [
                        (o[0], stamp(rows.cursor(k)[0]), REJECTED) for k, o in rejects])
            yield rows
            seq += batch.num_rows

    def _rows(self, window: Window) -> Iterator[tuple[Item | None, tuple[str, str] | None]]:
        """(item, None) or (None, (key, reason)) per row read, in source order."""
        for rows in self._batches(window):
            for o in rows.outcomes:
                if isinstance(o, Item):
                    yield o, None
                elif o is not None:
                    yield None, o

    def _drop_incremental(self, cursors: list[Cursor],
                          by_seq: list[Item | tuple[str, str] | None]) -> None:
        """Backfill of events: rows an incremental run sent, or will send, are not read."""
        assert self.already_sent is not None
        top = self.incremental_cursor
        for k, c in enumerate(cursors):
            c = tuple(c)
            if top is None or c > tuple(top) or self.already_sent.contains(c):
                by_seq[k] = None

    def _drop_acknowledged(self, cursors: list[Cursor],
                           by_seq: list[Item | tuple[str, str] | None]) -> None:
        """Lookback: rows at or before the stored cursor whose (key, cursor value, content)
        was acknowledged before are not read again (set to None)."""
        assert self.stored is not None
        stored = tuple(self.stored)
        old = [k for k, c in enumerate(cursors) if tuple(c) <= stored]
        if not old:
            return
        keys = [o.key if isinstance(o, Item) else o[0] for o in (by_seq[k] for k in old)
                if o is not None]
        known = self.deps.state.acked(self.i.name, keys)
        for k in old:
            o = by_seq[k]
            if o is None:
                continue
            key, mark = (o.key, digest(o.blob)) if isinstance(o, Item) else (o[0], REJECTED)
            if (key, stamp(cursors[k][0]), mark) in known:
                by_seq[k] = None

    def _stream(self, window: Window, done: list[JournalEntry]) -> None:
        state, name, counts = self.deps.state, self.i.name, self.counts
        progress = Progress(window.start)
        # in source order (the journal's order is not: a resumed run's requests refill gaps)
        skips = deque(sorted((e for e in done if e.start is None or window.start is None
                              or tuple(e.end) > tuple(window.start)),
                             key=lambda e: tuple(e.end)))
        packer = self.packer()
        sender = self._sender(progress)
        req_no = max((e.req_no for e in done), default=0)
        segment_start: Cursor | None = window.start
        # the last row read: (batch, index), its cursor built only when a request is cut
        last_rows: RowBatch | None = None
        last_k = 0
        last_fixed: Cursor | None = None
        stamp_of: dict[int, str] = {}  # lookback: cursor stamp of each item not yet sent
        in_doubt: list[tuple[str, str, str]] = []

        def last() -> Cursor | None:
            return last_rows.cursor(last_k) if last_rows is not None else last_fixed

        def send(batch: Batch | None, end: Cursor | None) -> None:
            nonlocal req_no, segment_start
            if batch is None or end is None:
                return
            req_no += 1
            stamps = tuple(stamp_of.pop(i.seq) for i in batch.items) if self.lookback else ()
            sender.submit(Segment(segment_start, end, batch=batch, stamps=stamps), req_no)
            segment_start = end

        def record(rejects: list[tuple[str, str, str]]) -> None:
            state.record_rejects(self.run_id, name, rejects)

        try:
            for rows in self._batches(window, record):
                for k, o in enumerate(rows.outcomes):
                    if o is None:
                        continue
                    if skips:
                        cursor = rows.cursor(k)
                        while skips and tuple(skips[0].end) < cursor:
                            skips.popleft()
                        entry = skips[0] if skips else None
                        if entry and (entry.start is None or tuple(entry.start) < cursor):
                            # inside a range the journal settled: cut before it, skip the row
                            if entry.req_no in self.crashed and isinstance(o, Item):
                                in_doubt.append((f"crash:{encode_cursor(cursor)}", o.key,
                                                 "the run stopped while the request was in "
                                                 "flight"))
                            send(packer.flush(), last())
                            if last() != tuple(entry.end):
                                progress.add(Segment(entry.start, tuple(entry.end),
                                                     settled=True))
                            segment_start = last_fixed = tuple(entry.end)
                            last_rows = None
                            continue
                    counts["read"] += 1
                    if isinstance(o, Item):
                        if self.lookback:
                            stamp_of[o.seq] = stamp(rows.cursor(k)[0])
                        full = packer.add(o)
                        if full is not None:
                            send(full, last())
                    else:
                        counts["rejected"] += 1
                    last_rows, last_k = rows, k
                if in_doubt:  # name the rows of requests in flight at a crash, once known
                    state.record_errors(self.run_id, name, "in_doubt", in_doubt)
                    in_doubt = []
            end = last()
            batch = packer.flush()
            if batch is not None:
                send(batch, end)
            elif end is not None and end != segment_start:
                progress.add(Segment(segment_start, end, settled=True))
            sender.drain()
        except SyncError:
            sender.settle_in_flight()
            raise
        finally:
            sender.close()

    def packer(self) -> Packer:
        """The packer of this integration's kind."""
        return TrackPacker(self.limits) if self.track else kinds.packer(self.i)

    def _sender(self, progress: Progress) -> Sender:
        service = self.i.service
        if "rate_limit" in service.model_fields_set:
            # an explicit rate tightens the budget shared by every run of this process
            self.deps.budgets.budget(
                service.base_url, RATE_GROUP_OF_KIND.get(self.i.kind, "identity"),
                requests=service.rate_limit.requests,
                per_seconds=service.rate_limit.per_seconds)
        deliverer = Deliverer(
            client=self.deps.client, api_key=self.deps.api_key, budgets=self.deps.budgets,
            base_url=service.base_url, retry_deadline=service.retry_deadline_seconds,
            log_context={"integration": self.i.name},
        )
        return Sender(RunContext(
            run_id=self.run_id, integration=self.i.name, state=self.deps.state,
            deliverer=deliverer, max_in_flight=service.max_in_flight,
            group_commits=self.i.kind == "attributes",
            resend_in_doubt=self.resend_in_doubt, bulk=self.options.mode != "incremental",
            may_move_cursor=self.may_move_cursor, counts=self.counts, report=self.report,
        ), progress)

    def may_move_cursor(self, position: Cursor) -> bool:
        """Incremental and full-resync runs move the integration cursor, never backwards
        (lookback re-reads rows below it); backfills never move it."""
        if self.options.mode == "backfill":
            return False
        return self.stored is None or tuple(position) > tuple(self.stored)

    def _count_window(self, window: Window) -> None:
        """The window's row count (one COUNT query), for progress lines only."""
        if self.deps.on_progress is not None:
            self.window_rows = count_rows(self.deps.engine, self.spec, window)
            self.report()

    def report(self) -> None:
        """Counts so far to `on_progress`, with `window_rows` once counted."""
        if self.deps.on_progress is not None:
            extra = {} if self.window_rows is None else {"window_rows": self.window_rows}
            self.deps.on_progress({**self.counts, **extra})


def dry_run(integration: Integration, engine: Engine, state: StateStore,
            clock: Callable[[], datetime] = lambda: datetime.now(UTC),
            options: RunOptions = RunOptions(dry_run=True), sample_size: int = 3) -> DryRun:
    """Read, validate and batch the next window without sending or recording anything.
    A deletes integration lists every identifier it would delete (`sample`), not a sample."""
    if integration.kind == "deletes":
        sample_size = sys.maxsize
    deps = Deps(engine=engine, state=state, client=httpx.Client(), api_key="", clock=clock)
    run = _Run(integration, deps, options)
    window = run._new_window()
    result = DryRun()
    packer = run.packer()
    for item, reject in run._rows(window):
        result.rows += 1
        if reject is not None:
            result.rejects.append(reject)
            continue
        assert item is not None
        if len(result.sample) < sample_size:
            result.sample.append(item.blob)
        if packer.add(item) is not None:
            result.requests += 1
    if packer.flush() is not None:
        result.requests += 1
    deps.client.close()
    return result
