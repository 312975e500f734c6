"""An integration: one synced table, as a frozen model (read from its file by `config.files`).

The model checks every rule that needs only the file (the kind's section, the formats, the
partitions); a bad file raises `ConfigError` naming the file, the key and the fix. Secrets
never live in these files: the warehouse URL may reference `${ENV_VAR}` and the API key is
read from the environment variable named by `service.api_key_env` at run time (`secrets`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)

from engage_sync.config import kind_registry, partition_names
from engage_sync.config.alerts import Alerts
from engage_sync.config.audience import AudienceSection, audience_defaults, audience_problem
from engage_sync.config.dbt_ref import DbtRef
from engage_sync.config.durations import Duration
from engage_sync.config.leave_check import leave_check_problem
from engage_sync.config.sections import (
    KIND_SECTIONS,
    AliasRenameSpec,
    DeleteSpec,
    Frozen,
    IdentifySpec,
    KindSpec,
    MergeSpec,
    SubscriptionSpec,
)
from engage_sync.config.service import (
    Service,
    TaskRunnerConfig,
)
from engage_sync.config.snapshot import (
    DEFAULT_MAX_LEAVES,
    Changes,
    MaxLeaves,
    OnLeave,
    SnapshotSection,
    snapshot_problem,
)
from engage_sync.config.track_formats import IdentifierKind, MappedFormat, PayloadFormat
from engage_sync.config.writeback import Writeback, key_column_clash

MAX_PARTITIONS = 64


class LeaveCheck(Frozen):
    """With a cursor and `on_leave`: how often the source's identifiers are read whole to find
    who left (`config.leave_check`)."""

    every: Duration = timedelta(days=1)


def _yaml_off(value: Any) -> Any:
    """YAML reads an unquoted `off` as false: `diff: off` means the setting `off`."""
    return "off" if value is False else value


DiffSetting = Annotated[Literal["fields", "off"], BeforeValidator(_yaml_off)]


class Warehouse(Frozen):
    """Where rows come from. `url` is a SQLAlchemy URL and may hold `${ENV_VAR}` references."""

    url: str = "duckdb:///warehouse.duckdb"
    connect_args: dict[str, Any] = Field(default_factory=dict)
    """Handed to the driver's connect() as they are (a host, a private key file and its
    passphrase, a token, an HTTP path...); string values may hold `${VAR}` references,
    expanded at run time. Never logged, never in an error or a record."""
    reader: Literal["auto", "sqlalchemy"] = "auto"
    """`auto`: Arrow-native where the project has a reader for the dialect (DuckDB; PostgreSQL
    through ADBC when `adbc-driver-postgresql` is installed); `sqlalchemy`: rows through
    SQLAlchemy's server-side cursor."""
    lock_wait_seconds: float = Field(default=300, ge=0, le=86_400)
    """DuckDB files only: how long a connect waits while another process holds the file's
    lock (DuckDB lets one process open a file for writing), as scheduled runs of several
    integrations of one file do when they start together. 0: fail at once."""


class Source(Frozen):
    """Exactly one of `table` or `query`. A view is read like a table."""

    table: str | None = None
    schema_name: str | None = Field(default=None, alias="schema")
    query: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Source:
        if (self.table is None) == (self.query is None):
            raise ValueError("give exactly one of 'table' (a table or view) or 'query' (SQL)")
        return self


_PAYLOAD_ID_COLUMNS: dict[str, tuple[str, ...]] = {
    "external_id": ("EXTERNAL_ID",),
    "user_alias": ("ALIAS_NAME", "ALIAS_LABEL"),
    "platform_id": ("BRAZE_ID",),
    "email": ("EMAIL",),
    "phone": ("PHONE",),
}


class Integration(Frozen):
    """One synced table. Built only by `config.files.load_integration`; frozen afterwards.

    Track kinds (attributes, events, purchases) read `payload` or `mapping`; every other kind
    reads the section named after it (`subscriptions`, `deletes`, `identify`, `merges`,
    `alias_renames`) and no other. `max_deletes` caps the rows a `deletes` run may send.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    kind: str
    warehouse: Warehouse = Warehouse()
    source: Source
    cursor_column: str = "UPDATED_AT"
    null_cursor: Literal["skip", "oldest"] = "skip"
    row_key: tuple[str, ...] = ()
    payload: PayloadFormat | None = None
    mapping: MappedFormat | None = None
    service: Service = Service()
    extract_batch_rows: int = Field(default=10_000, ge=100, le=1_000_000)
    settle_lag: Duration = timedelta(seconds=0)
    lease_seconds: float = Field(default=60, ge=1, le=3600)
    lookback: Duration | None = None
    in_doubt: Literal["resend", "skip"] = "resend"
    diff: DiffSetting = "fields"
    update_existing_only: bool | None = None
    failed_rows_alert_share: float | None = Field(default=None, ge=0, le=1)
    superseded_rows: Literal["skip", "send"] = "skip"
    """Mapped attributes: `skip` sends no object for a row followed by a later row of the same
    user in the same run (the later holds every mapped attribute); `send` sends every row in
    order (columns that hold array operations)."""
    failed_row_tries: int = Field(default=5, ge=1, le=100)
    """Sends a failed request's rows get, the first included, before they are parked (later
    runs send them again first: `run/retries.py`); 1: never sent again."""
    subscriptions: SubscriptionSpec | None = None
    deletes: DeleteSpec | None = None
    identify: IdentifySpec | None = None
    merges: MergeSpec | None = None
    alias_renames: AliasRenameSpec | None = None
    max_deletes: int = Field(default=1000, ge=0)
    attribute_types: Annotated[Literal["check", "off"], BeforeValidator(_yaml_off)] = "check"
    """Attributes: check the sent attributes' types against the workspace's definitions
    before the first request (`run/type_check.py`); `off` sends anyway."""
    trace: bool = False
    """Record per run what became of each row read, names only (`engage-sync trace`)."""
    max_data_points: int | None = Field(default=None, ge=1)
    """A run predicted (by its dry run) to bill more data points stops before sending."""
    max_data_points_per_day: int | None = Field(default=None, ge=1)
    """The data points every integration of the workspace (`service.base_url`) may bill in one
    UTC day, kept in the state database (`run/spend_cap.py`)."""
    partitions: int = Field(default=1, ge=1, le=MAX_PARTITIONS)
    task_runner: TaskRunnerConfig = TaskRunnerConfig()
    writeback: Writeback | None = None
    """Where each run's record and its rows' outcomes are written back (`writeback/`)."""
    dbt: DbtRef | None = None
    """The dbt model the integration reads (`config/dbt_ref.py`); else found by its table."""
    changes: Changes = "cursor"
    """`snapshot`: no cursor; each run compares the whole result with the snapshot."""
    on_leave: OnLeave = "keep"
    max_leaves: MaxLeaves = DEFAULT_MAX_LEAVES
    snapshot: SnapshotSection | None = None
    leave_check: LeaveCheck | None = None
    """With a cursor and `on_leave`: how often the source's identifiers are read whole."""
    alerts: Alerts | None = None
    """Volume, freshness and failed-run alerts (`config/alerts.py`); a folder's
    `_defaults.yaml` may set them for every file."""
    audience: AudienceSection | None = None
    """Kind audience: which audience each row names, kept as an array or as booleans."""

    @model_validator(mode="before")
    @classmethod
    def _audience_defaults(cls, data: Any) -> Any:
        return audience_defaults(data)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        kind_registry.facts(value)  # raises ValueError naming the known kinds
        return value

    @property
    def section(self) -> str | None:
        """The config section the kind reads, or None for `payload` / `mapping` kinds."""
        return kind_registry.facts(self.kind).section

    @model_validator(mode="after")
    def _partitions(self) -> Integration:
        problem = partition_problem(self, self.partitions)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _snapshot(self) -> Integration:
        m = self.mapping
        problem = snapshot_problem(
            self.changes, self.kind, m is not None, bool(m and m.subscription_groups),
            self.partitions, self.lookback is not None, set(self.model_fields_set),
            self.on_leave, m.identifier.kind if m is not None else None)
        if problem is None and self.changes == "cursor":
            problem = leave_check_problem(
                self.on_leave, self.leave_check is not None, set(self.model_fields_set),
                self.kind, m is not None, self.diff, self.partitions,
                m.identifier.kind if m is not None else None)
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _audience(self) -> Integration:
        m = self.mapping
        problem = audience_problem(
            self.kind, self.audience, bool(m and m.attributes),
            bool(m and (m.subscription_groups or m.event or m.purchase)))
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _writeback_columns(self) -> Integration:
        problem = key_column_clash(self.key_columns) if self.writeback is not None else None
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _format(self) -> Integration:
        if self.section is not None:
            return self._kind_section()
        for section in KIND_SECTIONS:
            if getattr(self, section) is not None:
                raise ValueError(f"'{section}' belongs to kind '{section}', not '{self.kind}'")
        if self.payload is not None and self.mapping is not None:
            raise ValueError("give 'payload' (the service's sync format) or 'mapping', not both")
        if self.mapping is not None:
            m = self.mapping
            wanted = {"attributes": bool(m.attributes or m.subscription_groups),
                      "events": m.event is not None, "purchases": m.purchase is not None}
            if not wanted.get(self.kind, True):
                needed = {"attributes": "attributes' or 'mapping.subscription_groups",
                          "events": "event", "purchases": "purchase"}
                raise ValueError(f"kind '{self.kind}' needs 'mapping.{needed[self.kind]}'")
            if m.subscription_groups and self.kind != "attributes":
                raise ValueError("'mapping.subscription_groups' is for kind 'attributes' only")
        return self

    def _kind_section(self) -> Integration:
        """A non-track kind: its own section (deletes has defaults), no payload or mapping."""
        if self.payload is not None or self.mapping is not None:
            raise ValueError(
                f"kind '{self.kind}' takes its columns from the '{self.kind}' section, "
                "not from 'payload' or 'mapping'")
        for section in KIND_SECTIONS:
            if section != self.kind and getattr(self, section) is not None:
                raise ValueError(f"'{section}' belongs to kind '{section}', not '{self.kind}'")
        if self.kind != "deletes" and getattr(self, str(self.section)) is None:
            raise ValueError(f"kind '{self.kind}' needs the '{self.kind}' section")
        if not self.row_key:
            problem = self.kind_spec.key_problem()
            if problem:
                raise ValueError(
                    f"kind '{self.kind}' needs 'row_key' here: {problem}; name columns that are "
                    "never NULL and unique within one cursor value (a NULL cannot order the "
                    "cursor)")
        return self

    @property
    def kind_spec(self) -> KindSpec:
        """The section of a non-track kind (`deletes` defaults to the service's format)."""
        if self.kind == "deletes":
            return self.deletes or DeleteSpec()
        spec = getattr(self, self.section or "", None)
        if spec is None:
            raise ValueError(f"kind '{self.kind}' has no section of its own")
        return spec

    @property
    def payload_format(self) -> PayloadFormat | None:
        """The payload format in effect: explicit, or the default when no mapping is given."""
        if self.mapping is not None:
            return None
        return self.payload or PayloadFormat()

    @property
    def identifier_columns(self) -> tuple[str, ...]:
        if self.mapping is not None:
            return self.mapping.identifier.columns
        fmt = self.payload_format
        assert fmt is not None
        return _PAYLOAD_ID_COLUMNS[fmt.identifier]

    @property
    def identifier_kind(self) -> IdentifierKind:
        if self.mapping is not None:
            return self.mapping.identifier.kind
        fmt = self.payload_format
        assert fmt is not None
        return fmt.identifier

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Columns that make a row unique within one cursor value, in sort order.

        Default: the identifier columns for attributes (one row per user and change); for
        events and purchases in the payload format the identifier plus PAYLOAD, since that
        format has no event id column.
        """
        if self.row_key:
            return self.row_key
        if self.section is not None:
            return self.kind_spec.key_columns()
        if self.kind == "attributes" or self.mapping is not None:
            return self.identifier_columns
        fmt = self.payload_format
        assert fmt is not None
        return (*self.identifier_columns, fmt.payload_column)

    @property
    def hidden_key_columns(self) -> frozenset[str]:
        """Key columns shown only as digests in row keys: the payload format's PAYLOAD column
        (in the default key of events and purchases, or named in `row_key`), since its values
        are payload and row keys go to errors, artifacts and logs."""
        fmt = self.payload_format if self.section is None else None
        if fmt is None:
            return frozenset()
        payload = fmt.payload_column.lower()  # column names match case-insensitively
        return frozenset(c for c in self.key_columns if c.lower() == payload)


def partition_problem(integration: Integration, partitions: int) -> str | None:
    """Why `integration` cannot run in `partitions` partitions, or None. A kind whose rows may
    touch two users, or must be seen whole, runs unpartitioned (`Kind.user_column`); partitions
    in other processes need one rate budget they all share."""
    if partitions <= 1:
        return None
    if kind_registry.facts(integration.kind).partition_column(integration) is None:
        return (f"'partitions' ({partitions}): kind '{integration.kind}' cannot be "
                "partitioned (its rows may touch two users, or its run must see every row: "
                "identity operations, deletes, subscriptions naming several identifier "
                "kinds); set partitions: 1")
    if (integration.task_runner.separate_processes
            and integration.service.rate_budget.backend == "local"):
        return (f"'service.rate_budget.backend' is local, but 'partitions' ({partitions}) run "
                f"on a Dask cluster (task_runner.type: dask), in processes that cannot share "
                "a local budget: together they would exceed the service's limit. Set "
                "service.rate_budget.backend to postgres or redis (with its url)")
    if len(integration.name) + len(partition_names.suffix(partitions - 1, partitions)) > 100:
        return "'name' is too long for a partitioned run (at most 100 characters with '#k/N')"
    return None
