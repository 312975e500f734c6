"""The shared resources a run uses, opened in one place: the state store, the warehouse's
engine, the write-back's engines, and the link to the service (the HTTP transport, the API
key, the rate budgets). A run's own are opened together, before its first stage
(`run_resources`).

Invariants: each is made here from the run's plan and this process's environment (or
Prefect's Secret blocks, handed in), once per run, and closed by whoever opened it; no
module-level engine or client. A setting that cannot be used is a ConfigError naming its key,
never its value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from pydantic import SecretStr

from engage_sync.adapters.budgets import budgets_for
from engage_sync.config import secrets
from engage_sync.config.integration import Integration
from engage_sync.config.service import budget_store
from engage_sync.deliver.definitions import Definitions, DefinitionsCache
from engage_sync.deliver.key_check import checked_definitions
from engage_sync.deliver.lean_transport import LeanTransport
from engage_sync.deliver.proxies import proxy_for
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.errors import ConfigError
from engage_sync.read import duckdb_turns, key_digest
from engage_sync.read.plan import RunPlan
from engage_sync.state.store import StateStore

DEFAULT_STATE_URL = "sqlite:///.engage-sync/state.db"
DUCKDB_MEMORY_LIMIT = "128MB"  # override with ?memory_limit=... in the warehouse URL
DUCKDB_SNAPSHOT_MEMORY_LIMIT = "96MB"
"""A snapshot run's (`changes: snapshot`): its comparison, its read and its advance each fill
DuckDB's limit, on top of a process that holds the reader's libraries; a smaller one keeps
the run's peak low at little cost in speed (benchmarks/README.md, snapshot rows)."""

SecretBlocks = Callable[[str, str], str]
"""(integration, block name) → the value of that Prefect Secret block; given only by the
paths that run Prefect (`adapters/secret_blocks.py`)."""


def state_url(explicit: str | None = None) -> str:
    return explicit or os.environ.get("ENGAGE_SYNC_STATE_URL") or DEFAULT_STATE_URL


POOL_WAIT_SECONDS = 600  # a thread waits this long for a state connection of a sized pool


def open_state(url: str | None = None, pool: int | None = None) -> StateStore:
    """The state store (`url`, else ENGAGE_SYNC_STATE_URL); `pool`: its connections at most
    (half kept open), the pool's threads waiting for one beyond (not an in-memory SQLite
    database, whose pool is one connection a thread)."""
    url = state_url(url)
    parsed = sa.engine.make_url(url)
    memory = parsed.database in (None, "", ":memory:")
    if parsed.get_backend_name() == "sqlite" and parsed.database and not memory:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)  # relative or absolute
    if pool is None or (parsed.get_backend_name() == "sqlite" and memory):
        return StateStore.from_url(url)
    kept = max(1, pool // 2)
    return StateStore.from_url(url, pool_size=kept, max_overflow=pool - kept,
                               pool_timeout=POOL_WAIT_SECONDS)


def portable_url(store: StateStore) -> SecretStr:
    """The store's URL for partitions in other threads or processes (a SQLite path made
    absolute), kept secret: it may hold a password."""
    url = store.engine.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        url = url.set(database=str(Path(url.database).resolve()))
    return SecretStr(url.render_as_string(hide_password=False))


def warehouse_engine(plan: RunPlan, read_only: bool = False) -> sa.Engine:
    """The warehouse's engine, at the URL and with the connect_args the plan expanded;
    `read_only` opens a DuckDB file read-only, so that several processes (the workers of a
    partitioned run) may read it at once."""
    integration, url = plan.integration, plan.spec.url
    connect_args = dict(plan.spec.connect_args)
    try:
        duckdb = url.startswith("duckdb:")
        if read_only and duckdb:
            connect_args["read_only"] = True
        engine = sa.create_engine(url, **({"connect_args": connect_args} if connect_args else {}))
        if duckdb:
            duckdb_turns.take_turns(engine, integration.warehouse.lock_wait_seconds)
        if duckdb and "memory_limit" not in url:
            # DuckDB sorts a window (or each slice of a large one, `duckdb_slices`) before
            # its first batch; a memory limit makes it spill to disk instead, which keeps
            # the sync's memory flat with the row count.
            # SET (not connect-time config) so other connections to the file stay compatible.
            limit = (DUCKDB_SNAPSHOT_MEMORY_LIMIT if integration.changes == "snapshot"
                     else DUCKDB_MEMORY_LIMIT)
            sa.event.listen(engine, "connect", partial(_limit_duckdb_memory, limit))
        if engine.dialect.name == "sqlite":  # digests of payload key columns (key_digest)
            sa.event.listen(engine, "connect", key_digest.sqlite_md5)
        return engine
    except Exception as exc:
        raise ConfigError(
            f"integration {integration.name}: cannot use warehouse URL "
            f"{secrets.redact_url(url)}: {exc}", key="warehouse.url") from exc


@contextmanager
def writeback_engine(integration: Integration, source: bool = False) -> Iterator[sa.Engine]:
    """The engine of the write-back's target (`writeback/writer.py` is handed this opener):
    `writeback.url`, else the warehouse's URL, with their connect_args (`source`: the
    warehouse's); SQL parameters hidden from its errors; a DuckDB file's turn released on
    exit."""
    wb = integration.writeback
    assert wb is not None
    url, args, key = ((wb.url, wb.connect_args or {}, "writeback.url") if wb.url and not source
                      else
                      (integration.warehouse.url, integration.warehouse.connect_args,
                       "warehouse.url"))
    expanded = secrets.expand(url, integration=integration.name, key=key)
    connect_args: dict[str, Any] = dict(secrets.expand_all(
        dict(args), integration=integration.name, key=key.replace("url", "connect_args")))
    engine = sa.create_engine(expanded, hide_parameters=True,
                              **({"connect_args": connect_args} if connect_args else {}))
    if engine.dialect.name == "duckdb":
        duckdb_turns.take_turns(engine, integration.warehouse.lock_wait_seconds)
    try:
        yield engine
    finally:
        duckdb_turns.release(engine)


def _limit_duckdb_memory(limit: str, dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.execute(f"SET memory_limit = '{limit}'")


@dataclass(frozen=True)
class ServiceLink:
    """What a run sends through: the transport, the key, the budgets; and, when checked, the
    workspace's attribute definitions the key check read (or a folder's cache held), for the
    type check."""

    transport: httpx.BaseTransport
    api_key: str
    budgets: RateBudgets
    definitions: Definitions | None = None


@contextmanager
def service_link(integration: Integration, budgets: RateBudgets | None = None,
                 blocks: SecretBlocks | None = None, *, check: bool = False,
                 cache: DefinitionsCache | None = None) -> Iterator[ServiceLink]:
    """The key (`service_key`), the budgets (their store resolved by `budget_store`, then
    `budgets_for`, this process's `budgets` shared) and the transport, in that order: the
    first that cannot be had raises; the transport is closed on exit. With `check`, the
    service is asked first whether it accepts the key (`key_check`: once a run, before it
    reads), unless `cache` (a folder's) holds this service's and key's definitions, read
    within its TTL (`deliver/definitions.py`)."""
    key = service_key(integration, blocks)
    where = budget_store(integration.service.rate_budget, integration.name)
    run_budgets = budgets_for(where, budgets)
    with http_transport(integration) as transport:
        yield ServiceLink(transport, key, run_budgets,
                          checked_definitions(transport, integration.service, key, integration.name,
                                              cache) if check else None)


def http_transport(integration: Integration) -> httpx.BaseTransport:
    """The keep-alive pool a run sends through (`deliver.Deliverer`): one connection per request
    in flight, through the proxy the environment names for the service's URL, by the standard
    library's rules (`proxies.proxy_for`). A proxy httpx cannot use is a ConfigError
    that shows it with its password hidden."""
    s = integration.service
    in_flight = s.max_in_flight
    proxy = proxy_for(s.base_url)
    if proxy is None:  # over a tenth less of a run's CPU than httpx's transport, TLS included
        return LeanTransport(max_idle=in_flight)  # (benchmarks/transport_tls.py)
    try:
        return httpx.HTTPTransport(
            limits=httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight),
            proxy=proxy)
    except (ValueError, httpx.InvalidURL):
        raise ConfigError(
            f"integration {integration.name}: the proxy the environment names for "
            f"{secrets.redact_url(s.base_url)} is not a proxy URL "
            f"({secrets.redact_url(proxy or '')}); check HTTPS_PROXY, HTTP_PROXY and ALL_PROXY",
            key="service.base_url") from None


def service_key(integration: Integration, blocks: SecretBlocks | None = None) -> str:
    """The API key: from the Prefect Secret block `service.api_key_block` names, else from
    the variable `service.api_key_env` names. A block without Prefect is a ConfigError."""
    name = integration.service.api_key_block
    if name is None:
        return secrets.api_key(integration.name, integration.service.api_key_env)
    if blocks is None:
        raise ConfigError(
            f"integration {integration.name}: the API key is in the Prefect Secret block "
            f"{name!r} ('service.api_key_block'), which only runs with Prefect read; run the "
            "integration as a flow (without --no-prefect), or name an environment variable "
            "in 'service.api_key_env' instead", key="service.api_key_block")
    return blocks(integration.name, name)


@dataclass(frozen=True)
class RunResources:
    """What one run uses from outside, opened before its first stage."""

    engine: sa.Engine
    link: ServiceLink | None
    """The service link, its key checked; None for a dry run, which sends nothing."""
    state_url: SecretStr
    """The state store's URL for partitions in other threads or processes (`portable_url`)."""


@contextmanager
def run_resources(plan: RunPlan, store: StateStore, budgets: RateBudgets | None = None,
                  blocks: SecretBlocks | None = None, cache: DefinitionsCache | None = None,
                  *, read_only: bool = False, check: bool = True) -> Iterator[RunResources]:
    """A run's resources, in the order its failures are told: the warehouse's engine, then for
    a live run the service link, its key checked unless not `check` (`service_link`: the key,
    the budgets, the transport); each closed on exit (a DuckDB file's turn released). A
    partition in a process of its own opens a DuckDB file `read_only` (`warehouse_engine`),
    and leaves the key check to its coordinator."""
    state = portable_url(store)
    with ExitStack() as held:
        engine = warehouse_engine(plan, read_only=read_only)
        held.callback(duckdb_turns.release, engine)
        link = None if plan.options.dry_run else held.enter_context(service_link(
            plan.integration, budgets, blocks, check=check, cache=cache))
        yield RunResources(engine, link, state)
