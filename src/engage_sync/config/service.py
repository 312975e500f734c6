"""The `service` section of an integration file: where the service is, how the key is found,
the request limits, the rate and where its budget lives. Frozen models; a bad value is a
ValidationError that `config.parse_integration` turns into a ConfigError naming the key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, field_validator, model_validator

from engage_sync.config.secrets import env_name_problem, expand, redact_url
from engage_sync.config.sections import Frozen
from engage_sync.errors import ConfigError


class Limits(Frozen):
    """Request limits of the service; every figure is a default an account may change."""

    objects_per_request: int = Field(default=75, ge=1, le=75)
    per_array: bool = False
    max_body_bytes: int = Field(default=4_000_000, ge=10_000, le=4_000_000)
    ids_per_request: int = Field(default=50, ge=1, le=50)


class RateLimit(Frozen):
    requests: int = Field(default=3000, ge=1)
    per_seconds: float = Field(default=3.0, gt=0)


class RateBudgetConfig(Frozen):
    """Where the rate budget lives: `local` (this process only) or a store every process of a
    workspace shares. `url` may hold `${ENV_VAR}` references, expanded at run time."""

    backend: Literal["local", "postgres", "redis"] = "local"
    url: str | None = None
    block: int | None = Field(default=None, ge=1, le=1000)

    @model_validator(mode="after")
    def _url_for_shared(self) -> RateBudgetConfig:
        if self.backend == "local" and self.url is not None:
            raise ValueError("the local backend takes no 'url'; set backend: postgres or redis")
        if self.backend != "local" and not self.url:
            raise ValueError(f"the {self.backend} backend needs a 'url' (e.g. ${{BUDGET_URL}})")
        if self.url is not None and "$" not in self.url.partition("://")[0]:
            check_budget_url(self.backend, self.url)
        return self


RATE_BUDGET_SCHEMES = {"postgres": ("postgresql", "postgres", "postgresql+psycopg"),
                       "redis": ("redis", "rediss", "unix")}


def check_budget_url(backend: str, url: str) -> None:
    """Raises ValueError unless `url` (expanded, or with a literal scheme) suits `backend`;
    the message shows the URL with its password hidden."""
    allowed = RATE_BUDGET_SCHEMES.get(backend, ())
    if url.partition("://")[0].lower() not in allowed:
        raise ValueError(f"{redact_url(url)} is not a {backend} URL (it should start with "
                         f"{' or '.join(s + '://' for s in allowed)})")


@dataclass(frozen=True)
class BudgetStore:
    """A shared rate budget's store, resolved for a run: its URL expanded, and as messages
    and reprs show it (the password hidden)."""

    backend: str
    url: str = field(repr=False)
    shown: str
    block: int | None


def budget_store(cfg: RateBudgetConfig, integration: str) -> BudgetStore | None:
    """Where a run's budgets are shared (None for `local`: this process only). Raises
    ConfigError naming the integration and `service.rate_budget.url` for an unset variable
    or a URL that does not suit the backend, never showing its password."""
    if cfg.backend == "local":
        return None
    key = "service.rate_budget.url"
    url = expand(cfg.url or "", integration=integration, key=key)
    try:
        check_budget_url(cfg.backend, url)
    except ValueError as exc:
        raise ConfigError(f"integration {integration}: {exc}", key=key) from None
    return BudgetStore(cfg.backend, url, redact_url(url), cfg.block)


class TaskRunnerConfig(Frozen):
    """Where the partitions of a partitioned run (`partitions` > 1) run, each a Prefect task
    run: `threads` (Prefect's thread pool in the flow's process, the default) or `dask` (a
    `LocalCluster` of `n_workers` processes started for the run, or the existing cluster at
    `address`, which may hold `${ENV_VAR}` references)."""

    type: Literal["threads", "dask"] = "threads"
    address: str | None = None
    n_workers: int = Field(default=2, ge=1, le=256)
    threads_per_worker: int | None = Field(default=None, ge=1, le=64)
    """Threads of each LocalCluster worker (default: enough for every partition to run at
    once)."""

    @model_validator(mode="after")
    def _address_for_dask(self) -> TaskRunnerConfig:
        if self.address is not None and self.type != "dask":
            raise ValueError("'address' is the address of a Dask scheduler: set type: dask")
        return self

    @property
    def separate_processes(self) -> bool:
        """Partitions may run in other processes than the flow's (no shared memory)."""
        return self.type == "dask"


class Service(Frozen):
    base_url: str = "http://127.0.0.1:8787"
    api_key_env: str = "ENGAGE_API_KEY"
    api_key_block: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]{0,99}$")
    """The name of a Prefect Secret block holding the API key: read instead of `api_key_env`
    by runs that have Prefect (flows, deployments), never by `--no-prefect`."""
    limits: Limits = Limits()
    rate_limit: RateLimit = RateLimit()
    rate_budget: RateBudgetConfig = RateBudgetConfig()
    # 8: an exact journal (events, purchases, subscriptions, identity) then journals up to four
    # requests a transaction, which saves CPU (benchmarks/README.md); a kill leaves at most 8
    # in doubt.
    # Up to 256: a service that answers in 100 ms needs 100 for its 1,000 requests a second
    max_in_flight: int = Field(default=8, ge=1, le=256)
    timeout_seconds: float = Field(default=30.0, gt=0)
    retry_deadline_seconds: float = Field(default=600.0, gt=0)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        """A variable name, so no message built from it can become a shell command."""
        problem = env_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value
