"""A run prepared once: its integration, its kind, what it reads and how it runs (`RunPlan`).

Invariants:
- a run's kind and source spec are resolved once, by `prepare` at the run's start, and every
  stage (the schema guard, the windows, the reader, the loop, the dry run, the coordinator,
  the write-back, the lineage) asks the plan instead of deriving them again from the file: no
  two stages can disagree on what the run reads;
- the plan is frozen; a run under other options (a retry pass's runs, a partition's) is the
  same plan `with_options`, its kind and spec kept.
It lives in `read/`, the lowest layer that takes it (the reader), so that every stage above
may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from engage_sync import kinds
from engage_sync.config import secrets
from engage_sync.config.integration import Integration
from engage_sync.config.run_options import RunOptions
from engage_sync.kinds import Kind
from engage_sync.read.source_spec import SourceSpec


@dataclass(frozen=True)
class RunPlan:
    """One run's settings, resolved: read by every stage, changed by none."""

    integration: Integration
    """The file's model, its service URL's `${VAR}` references expanded."""
    kind: Kind
    spec: SourceSpec
    options: RunOptions
    resend_in_doubt: bool
    """The in-doubt policy (`Kind.resends_in_doubt`), decided once for every part of the run."""

    @property
    def name(self) -> str:
        return self.integration.name

    @property
    def lookback(self) -> timedelta | None:
        """The re-read period: the integration's `lookback`, in an incremental run only."""
        return self.integration.lookback if self.options.mode == "incremental" else None

    @property
    def partitions(self) -> int:
        """The partitions asked for: the run's option, else the integration's."""
        return self.options.partitions or self.integration.partitions

    def with_options(self, options: RunOptions) -> RunPlan:
        """The same run's facts under other options (a retry of failed rows, a partition)."""
        return replace(self, options=options)


def prepare(integration: Integration, options: RunOptions) -> RunPlan:
    """The plan of a run of `integration`. Raises ConfigError for an unset variable that the
    service URL, `warehouse.connect_args` or `warehouse.url` names."""
    kind = kinds.kind_of(integration)
    url = secrets.expand(integration.service.base_url, integration=integration.name,
                         key="service.base_url")  # `${VAR:-default}` references
    integration = integration.model_copy(
        update={"service": integration.service.model_copy(update={"base_url": url})})
    return RunPlan(integration, kind, source_spec(integration, kind), options,
                   resend_in_doubt=kind.resends_in_doubt(integration))


def source_spec(integration: Integration, kind: Kind) -> SourceSpec:
    """What to read: the cursor and key columns, then the columns the kind reads."""
    cols = [*([integration.cursor_column] if integration.changes == "cursor" else []),
            *integration.key_columns, *kind.columns(integration)]  # snapshot: no cursor
    return SourceSpec(
        integration=integration.name,
        table=integration.source.table,
        schema=integration.source.schema_name,
        query=integration.source.query,
        cursor_column=integration.cursor_column,
        key_columns=integration.key_columns,
        columns=tuple(dict.fromkeys(cols)),
        reader=integration.warehouse.reader,
        null_cursor_oldest=integration.null_cursor == "oldest",
        digested=integration.hidden_key_columns,
        partition_column=kind.partition_column(integration),
        superseded_by=kind.superseded_by(integration),
        merged=kind.merges(integration),
        connect_args=secrets.connect_args(integration.warehouse.connect_args,
                                          integration.name),
        url=secrets.expand(integration.warehouse.url, integration=integration.name,
                           key="warehouse.url"),
    )
