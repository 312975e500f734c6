"""Integration files (YAML) parsed once into frozen models.

A bad file raises `ConfigError` naming the file, the key and the fix. Secrets never live in
these files: the warehouse URL may reference `${ENV_VAR}` and the API key is read from the
environment variable named by `service.api_key_env` at run time (see `secrets.py`).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from engage_sync.config import kind_registry, partition_names
from engage_sync.config.sections import (
    FROZEN,
    KIND_SECTIONS,
    AliasRenameSpec,
    DeleteSpec,
    IdentifySpec,
    KindSpec,
    MergeSpec,
    SubscriptionSpec,
    UserColumns,
)
from engage_sync.config.service import (
    Service,
    TaskRunnerConfig,
)
from engage_sync.errors import ConfigError

IdentifierKind = Literal["external_id", "user_alias", "platform_id", "email", "phone"]

MAX_PARTITIONS = 64

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: Any) -> timedelta:
    """'90s', '5m', '2h', '1d' or a number of seconds → timedelta; raises ValueError."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=float(value))
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError("not a duration; write it like 90s, 5m, 2h or 1d")
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def _yaml_off(value: Any) -> Any:
    """YAML reads an unquoted `off` as false: `diff: off` means the setting `off`."""
    return "off" if value is False else value


DiffSetting = Annotated[Literal["fields", "off"], BeforeValidator(_yaml_off)]


class _Frozen(BaseModel):
    model_config = FROZEN


class Warehouse(_Frozen):
    """Where rows come from. `url` is a SQLAlchemy URL and may hold `${ENV_VAR}` references."""

    url: str = "duckdb:///warehouse.duckdb"
    reader: Literal["auto", "sqlalchemy"] = "auto"
    """`auto`: Arrow-native where the project has a reader for the dialect (DuckDB; PostgreSQL
    through ADBC when `adbc-driver-postgresql` is installed); `sqlalchemy`: rows through
    SQLAlchemy's server-side cursor."""


class Source(_Frozen):
    """Exactly one of `table` or `query`. A view is read like a table."""

    table: str | None = None
    schema_name: str | None = Field(default=None, alias="schema")
    query: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Source:
        if (self.table is None) == (self.query is None):
            raise ValueError("give exactly one of 'table' (a table or view) or 'query' (SQL)")
        return self


class PayloadFormat(_Frozen):
    """The service's own warehouse-sync format: UPDATED_AT, one identifier, JSON PAYLOAD."""

    identifier: IdentifierKind = "external_id"
    payload_column: str = "PAYLOAD"


class EventMapping(_Frozen):
    name: str | None = None
    name_column: str | None = None
    time: str | None = None
    app_id: str | None = None
    properties: dict[str, str] = {}

    @model_validator(mode="after")
    def _one_name(self) -> EventMapping:
        if (self.name is None) == (self.name_column is None):
            raise ValueError("give exactly one of 'name' (a fixed event name) or 'name_column'")
        return self


class PurchaseMapping(_Frozen):
    product_id: str
    currency: str
    price: str
    quantity: str | None = None
    time: str | None = None
    app_id: str | None = None
    properties: dict[str, str] = {}


class Identifier(UserColumns):
    """Mapped format of attributes, events and purchases: the user's column(s), of exactly one
    identifier kind (the columns and their checks are those of every kind's `UserColumns`)."""

    @model_validator(mode="after")
    def _one_kind(self) -> Identifier:
        if len(self.kinds()) != 1:
            raise ValueError(
                "name exactly one identifier: external_id, alias_name + alias_label, "
                "platform_id, email or phone"
            )
        return self

    @property
    def kind(self) -> IdentifierKind:
        return self.kinds()[0][0]


class TrackGroup(_Frozen):
    """One subscription group set through /users/track attributes: a fixed `group_id` or a
    `group_column`, and the `state_column` (subscribed / unsubscribed; NULL = leave as is)."""

    group_id: str | None = Field(default=None, min_length=1)
    group_column: str | None = None
    state_column: str

    @model_validator(mode="after")
    def _one_group(self) -> TrackGroup:
        if (self.group_id is None) == (self.group_column is None):
            raise ValueError("give exactly one of 'group_id' (a fixed id) or 'group_column'")
        return self

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.group_column, self.state_column) if c)


class MappedFormat(_Frozen):
    """Any table or query: columns mapped to the identifier and to attributes / event / purchase.

    `subscription_groups` (attributes kind only) adds `subscription_groups` to each attributes
    object, one entry per listed group whose state is not NULL in the row.
    """

    identifier: Identifier
    attributes: dict[str, str] = {}
    subscription_groups: tuple[TrackGroup, ...] = ()
    event: EventMapping | None = None
    purchase: PurchaseMapping | None = None

    @property
    def subscription_group_columns(self) -> list[str]:
        return [c for g in self.subscription_groups for c in g.columns]


_PAYLOAD_ID_COLUMNS: dict[str, tuple[str, ...]] = {
    "external_id": ("EXTERNAL_ID",),
    "user_alias": ("ALIAS_NAME", "ALIAS_LABEL"),
    "platform_id": ("BRAZE_ID",),
    "email": ("EMAIL",),
    "phone": ("PHONE",),
}


class Integration(_Frozen):
    """One synced table. Built only by `load_integration`; frozen afterwards.

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
    subscriptions: SubscriptionSpec | None = None
    deletes: DeleteSpec | None = None
    identify: IdentifySpec | None = None
    merges: MergeSpec | None = None
    alias_renames: AliasRenameSpec | None = None
    max_deletes: int = Field(default=1000, ge=0)
    partitions: int = Field(default=1, ge=1, le=MAX_PARTITIONS)
    task_runner: TaskRunnerConfig = TaskRunnerConfig()

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


_SECRET_WORDS = ("key", "password", "secret", "token")


def _describe(err: ValidationError) -> str:
    """Each error as key and rule, never the value (models hide input; messages name keys)."""
    parts = []
    for e in err.errors(include_input=False, include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "is not a key here; check its spelling and place"
            if any(w in str(e["loc"][-1]).lower() for w in _SECRET_WORDS):
                msg += (". Never write a secret in this file: export it in an environment "
                        "variable and name the variable in 'service.api_key_env' (API key) "
                        "or as ${VAR} in 'warehouse.url' (password)")
        parts.append(f"key '{loc}': {msg}")
    return "; ".join(parts)


def parse_integration(raw: Any, *, file: str) -> Integration:
    """A mapping (as read from YAML) → Integration. Raises ConfigError naming file and key,
    raised outside the `except` so no exception holding the file's values is chained to it."""
    if not isinstance(raw, dict):
        raise ConfigError("the file must hold a mapping of keys (name, kind, source, ...)",
                          file=file)
    raw = {"name": Path(file).stem, **raw}
    try:
        return Integration.model_validate(raw)
    except ValidationError as exc:
        problem = (f"{_describe(exc)}; fix the file (its keys are listed in the README) "
                   "and run again")
    raise ConfigError(problem, file=file)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, without the snippet of the file PyYAML quotes (it may hold a secret)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = getattr(exc, "problem", None) or type(exc).__name__
    return f"not valid YAML{where}: {what}"


def load_integration(path: str | Path) -> Integration:
    """Read and validate one integration file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror})", file=str(path)) from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = _yaml_problem(exc)
    else:
        return parse_integration(raw, file=str(path))
    raise ConfigError(problem, file=str(path))


def integration_files(folder: str | Path) -> list[Path]:
    """The integration files of a folder, sorted by name (files starting with '_' are skipped)."""
    folder = Path(folder)
    return sorted(
        p for p in [*folder.glob("*.yaml"), *folder.glob("*.yml")] if not p.name.startswith("_")
    )


def resolve_integration(name_or_path: str, config_dir: str | None = None) -> Path:
    """An integration file path, or a name looked up as `<config dir>/<name>.yaml` (the folder
    is `config_dir`, else ENGAGE_SYNC_CONFIG_DIR, else ./config). Raises ConfigError."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    folder = config_dir or os.environ.get("ENGAGE_SYNC_CONFIG_DIR", "config")
    candidate = Path(folder) / f"{name_or_path}.yaml"
    if not candidate.exists():
        raise ConfigError(
            f"no integration '{name_or_path}': give a file path or a name with a file "
            f"{candidate} (the folder is --config-dir / config_dir or ENGAGE_SYNC_CONFIG_DIR)")
    return candidate
