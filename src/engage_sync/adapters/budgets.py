"""The rate budgets a run of an integration uses, from its `service.rate_budget` section.

One store client per (backend, URL) and process, so the runs of a serving process reuse its
connections. The URL comes resolved (`config.service.budget_store`: a bad one is a
ConfigError there, naming the integration and the key, never the password).
"""

from __future__ import annotations

import threading

from engage_sync.config.service import BudgetStore
from engage_sync.deliver.budget_store import TokenStore
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.deliver.shared_budget import SharedRateBudgets

_STORES: dict[tuple[str, str], TokenStore] = {}
_STORES_LOCK = threading.Lock()


def budgets_for(where: BudgetStore | None, given: RateBudgets | None = None) -> RateBudgets:
    """The rate budgets a run uses, `where` its `service.rate_budget` resolves
    (`config.service.budget_store`).

    `local` (None): `given` (shared by the integrations of one flow run) or new private ones.
    `postgres` / `redis`: budgets on that store; one store client per URL and process, so
    runs of a serving process reuse its connections."""
    if where is None:
        return given if given is not None else RateBudgets()
    with _STORES_LOCK:
        store = _STORES.get((where.backend, where.url))
        if store is None:
            store = _STORES[(where.backend, where.url)] = _open_store(where)
    if isinstance(given, SharedRateBudgets) and given.store is store:
        return given
    return SharedRateBudgets(store, block=where.block)


def _open_store(where: BudgetStore) -> TokenStore:
    """The store client (connections are opened lazily, at the first take), named in messages
    by its URL with the password hidden."""
    if where.backend == "postgres":
        from engage_sync.deliver.store_postgres import PostgresTokenStore

        return PostgresTokenStore(where.url, where.shown)
    from engage_sync.deliver.store_redis import RedisTokenStore

    return RedisTokenStore(where.url, where.shown)
