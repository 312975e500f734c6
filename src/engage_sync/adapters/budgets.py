"""The rate budgets a run of an integration uses, from its `service.rate_budget` section.

One store client per (backend, URL) and process, so the runs of a serving process reuse its
connections. A bad URL is a ConfigError naming the integration and the key, never the
password.
"""

from __future__ import annotations

import threading

from engage_sync.config import secrets
from engage_sync.config.integration import Integration
from engage_sync.config.service import check_budget_url
from engage_sync.deliver.budget_store import TokenStore
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.deliver.shared_budget import SharedRateBudgets
from engage_sync.errors import ConfigError

_STORES: dict[tuple[str, str], TokenStore] = {}
_STORES_LOCK = threading.Lock()


def budgets_for(integration: Integration, given: RateBudgets | None = None) -> RateBudgets:
    """The rate budgets a run of `integration` uses (`service.rate_budget`).

    `local`: `given` (shared by the integrations of one flow run) or new private ones, exactly
    as before. `postgres` / `redis`: budgets on the store at the expanded URL; one store
    client per URL and process, so runs of a serving process reuse its connections. Raises
    ConfigError naming the integration and key for a bad URL."""
    cfg = integration.service.rate_budget
    if cfg.backend == "local":
        return given if given is not None else RateBudgets()
    key = "service.rate_budget.url"
    url = secrets.expand(cfg.url or "", integration=integration.name, key=key)
    try:
        check_budget_url(cfg.backend, url)
    except ValueError as exc:
        raise ConfigError(f"integration {integration.name}: {exc}", key=key) from None
    with _STORES_LOCK:
        store = _STORES.get((cfg.backend, url))
        if store is None:
            shown = secrets.redact_url(url)  # how messages and reprs name the store
            store = _STORES[(cfg.backend, url)] = _open_store(cfg.backend, url, shown)
    if isinstance(given, SharedRateBudgets) and given.store is store:
        return given
    return SharedRateBudgets(store, block=cfg.block)


def _open_store(backend: str, url: str, shown: str) -> TokenStore:
    """The store client (connections are opened lazily, at the first take); `shown`: its URL
    as messages name it, the password hidden."""
    if backend == "postgres":
        from engage_sync.deliver.store_postgres import PostgresTokenStore

        return PostgresTokenStore(url, shown)
    from engage_sync.deliver.store_redis import RedisTokenStore

    return RedisTokenStore(url, shown)
