"""Whether the service accepts a run's API key, asked once before the run reads.

A run with nothing to send would never learn that its key is wrong, and would read as a
success. So before it reads, a run asks once: `GET /custom_attributes`, one page of a read in
a rate group no run sends to (the `/users/track` budget and its counts are untouched). The
runs of a folder ask once per service and key within a few minutes: the first answer, kept by
`deliver/definitions.py`, stands for the others.

Invariants:
- only a 401 refuses the key (FatalDeliveryError): a 403 is a key the service knows without
  this read's permission, and a 429, a 5xx or no answer say nothing against the key; the run
  goes on and its own requests meet whatever it is;
- one attempt, never retried (the deliverer owns retries), through the run's own transport
  (the same proxy and pool as its requests);
- the message names where the key comes from, never the key.
"""

from __future__ import annotations

import logging

import httpx

from engage_sync.config.service import Service
from engage_sync.deliver.definitions import PATH, Definitions, DefinitionsCache, get_page
from engage_sync.errors import FatalDeliveryError

log = logging.getLogger(__name__)

CHECK_PATH = PATH


def check_key(transport: httpx.BaseTransport, service: Service, api_key: str,
              integration: str) -> httpx.Response | None:
    """Raise FatalDeliveryError when the service answers 401 to one GET of CHECK_PATH with
    `api_key`; return otherwise. `service` is the integration's section, its URL expanded.
    Returns the answer, read, for the type check to reuse (None when there was none)."""
    try:
        response = get_page(transport, service, api_key)(CHECK_PATH)  # the definitions' pager
    except httpx.HTTPError as exc:  # the run's own requests will meet it, with retries
        log.debug("integration %s: the key check had no answer (%s); the run goes on",
                  integration, type(exc).__name__)
        return None
    if response.status_code == 401:
        raise FatalDeliveryError(
            f"integration {integration}: the service refused the API key (401 to GET "
            f"{CHECK_PATH}, asked before reading): nothing was read or sent; check the key in "
            f"{_source(service)}")
    return response


def checked_definitions(transport: httpx.BaseTransport, service: Service, api_key: str,
                        integration: str, cache: DefinitionsCache | None = None
                        ) -> Definitions | None:
    """The key checked (`check_key`) and its answer as the first page of the definitions,
    unless `cache` (a folder's) holds this service's and key's, read within its TTL: they
    stand for the check. None when the check had no answer."""
    url = service.base_url
    found = cache.get(url, api_key) if cache is not None else None
    if found is None:
        answer = check_key(transport, service, api_key, integration)
        found = None if answer is None else Definitions.from_answer(answer)
        if found is not None and cache is not None:
            cache.put(url, api_key, found)
    return found


def _source(service: Service) -> str:
    if service.api_key_block is not None:
        return f"the Prefect Secret block {service.api_key_block!r} (service.api_key_block)"
    return f"the variable {service.api_key_env} (service.api_key_env)"
