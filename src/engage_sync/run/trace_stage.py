"""The row trace (`trace: true`): a stage pair that records, per row a run reads, its outcome
and the attribute names sent and left out as unchanged, for `engage-sync trace`.

`Before` sits first in the run's stages and sees each item whole; `After` sits last and sees
what the field diff left of it: an item (its names sent, the others unchanged) or UNCHANGED
(every name unchanged). A reject is recorded with its reason at once; an item once its request
settled (acknowledged, failed or in doubt), so a trace never claims what was not settled.

Invariants: names only (an object's keys but its identifier and `_` flags), never a value; a
key is stored as a hash (`state/traces.py`); rows an earlier attempt of the run settled (None)
are not traced again; the run's id is bound once its row is opened (`bind`).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from engage_sync.diff.field_diff import identifier_of
from engage_sync.items import Item, RowOutcome, Unchanged
from engage_sync.run.stage import Stages
from engage_sync.state.store import StateStore

Row = tuple[str, str, Sequence[str], Sequence[str], str | None]


def names_of(item: Item) -> list[str]:
    """The attribute names an attributes object carries (none for other arrays)."""
    if item.array != "attributes":
        return []
    ident = identifier_of(item.user)
    return [k for k in orjson.loads(item.blob) if k != ident and not k.startswith("_")]


class Trace:
    """What both halves share: the run, the names read per row, the items awaiting settling."""

    def __init__(self, integration: str, state: StateStore) -> None:
        self.integration, self.state, self.run_id = integration, state, ""
        self.read: dict[int, tuple[str, list[str]]] = {}
        self.waiting: dict[int, tuple[str, list[str], list[str]]] = {}

    def record(self, rows: list[Row]) -> None:
        if rows and self.run_id:
            self.state.record_traces(self.run_id, self.integration, rows)


class _Quiet:
    def open(self) -> None: ...
    def skipped(self, items: Sequence[Item]) -> None: ...
    def take_counts(self) -> tuple[int, int]:
        return 0, 0
    def settled(self, acked: Sequence[Item], doubted: Sequence[Item],
                settled: Sequence[Item]) -> None: ...
    def close(self) -> None: ...
    def stop(self) -> None: ...


class Before(_Quiet):
    """First stage: each item's key and names as read; rejects with their reasons."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def batch(self, outcomes: list[RowOutcome]) -> None:
        self.trace.read = {k: (o.key, names_of(o)) for k, o in enumerate(outcomes)
                           if isinstance(o, Item)}
        self.trace.record([(o[0], "rejected", (), (), o[1]) for o in outcomes
                           if isinstance(o, tuple)])


class After(_Quiet):
    """Last stage: what the diff left of each item; an item recorded once it settled."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def batch(self, outcomes: list[RowOutcome]) -> None:
        trace, same = self.trace, list[Row]()
        for k, (key, names) in trace.read.items():
            o = outcomes[k]
            if isinstance(o, Unchanged):
                same.append((key, "unchanged", (), names, None))
            elif isinstance(o, Item):
                sent = names_of(o)
                trace.waiting[o.seq] = (key, sent, [n for n in names if n not in sent])
        trace.read = {}
        trace.record(same)

    def settled(self, acked: Sequence[Item], doubted: Sequence[Item],
                settled: Sequence[Item]) -> None:
        ok, unsure = {i.seq for i in acked}, {i.seq for i in doubted}
        rows: list[Row] = []
        for item in settled:
            key, sent, same = self.trace.waiting.pop(item.seq, (item.key, [], []))
            outcome = "sent" if item.seq in ok else "in_doubt" if item.seq in unsure else "failed"
            rows.append((key, outcome, sent, same, None))
        self.trace.record(rows)


def trace_stages(integration: str, state: StateStore) -> tuple[Before, After]:
    """The trace's two stages: `Before` goes first in a run's stages, `After` last."""
    trace = Trace(integration, state)
    return Before(trace), After(trace)


def bind(stages: Stages, run_id: str) -> None:
    """Tell the run's trace (if it traces) its run's id, once its run row is open."""
    for stage in stages.stages:
        if isinstance(stage, Before | After):
            stage.trace.run_id = run_id
