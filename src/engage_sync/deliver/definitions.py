"""The workspace's attribute definitions (`GET /custom_attributes`): the one pager of the run's
type check (`run/type_check.py`) and of `engage-sync plan` (`adapters/plan_checks.py`), and a
small cache that lets a folder's runs share one walk of the pages.

Invariants:
- the first page is the key check's own answer (`deliver/key_check.py`), never asked twice;
  further pages follow `Link: rel="next"`, at most MAX_PAGES, and only as far as asked (the
  pages are alphabetical: a name missing so far is asked for only while it sorts after the
  last name seen);
- only a first page answered 200 or 403 is kept (a 403 is a key the service knows without
  this read's permission); anything else says nothing and is asked again by the next run;
- the cache is keyed by the service's URL and a hash of the key, never the key; an entry is
  used for TTL_SECONDS after its first page was read, then read again. While it is fresh it
  also stands for the key check: the service accepted that key within the TTL.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from engage_sync.config.service import Service

PATH = "/custom_attributes"
MAX_PAGES = 200  # 10,000 definitions at 50 a page: a Link that never ends does not hang a run
TTL_SECONDS = 300.0
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')

Get = Callable[[str], httpx.Response]
"""A GET of one page's URL, answered and read."""


@dataclass
class Definitions:
    """What the pages read so far hold: the first page's status, name → definition, and the
    next page's URL (None once the last page was read, or the walk stopped on a bad page)."""

    status: int
    found: dict[str, dict[str, Any]] = field(default_factory=dict)
    next_url: str | None = None
    pages: int = 0
    _reading: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def from_answer(cls, answer: httpx.Response) -> Definitions:
        """The first page (the key check's answer); a 200 that is not a list of definitions
        is kept as status 0 (nothing to check against)."""
        out = cls(answer.status_code)
        if answer.status_code == 200 and not out.add(answer):
            out.status = 0
        return out

    def add(self, page: httpx.Response) -> bool:
        """One page's definitions and its next link; False when it holds no list of them."""
        try:
            records = orjson.loads(page.content)["attributes"]
            self.found.update({str(a["name"]): a for a in records})
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.next_url = None
            return False
        link = _NEXT.search(page.headers.get("link", ""))
        self.next_url = link.group(1) if link else None
        self.pages += 1
        return True

    def read(self, get: Get, wanted: set[str] | None = None) -> dict[str, dict[str, Any]]:
        """Name → definition, reading further pages while one may hold a wanted name (every
        page when `wanted` is None) and the Link goes on. One reader at a time: a folder's
        runs share one Definitions across threads."""
        with self._reading:
            return self._read(get, wanted)

    def _read(self, get: Get, wanted: set[str] | None) -> dict[str, dict[str, Any]]:
        while self.status == 200 and self.next_url is not None and self.pages < MAX_PAGES:
            if wanted is not None:
                last = max(((n.casefold(), n) for n in self.found), default=("", ""))
                if not any((w.casefold(), w) > last for w in wanted - self.found.keys()):
                    break
            page = get(self.next_url)
            if page.status_code != 200:
                break  # kept where it is: a later run may ask again
            self.add(page)
        return self.found


def get_page(transport: httpx.BaseTransport, service: Service, api_key: str) -> Get:
    """A GET of a page through the run's transport (a relative link made absolute against
    the service's URL), with the key and the service's timeout; answered and read."""
    base = service.base_url.rstrip("/")
    timeout = httpx.Timeout(service.timeout_seconds).as_dict()

    def get(url: str) -> httpx.Response:
        request = httpx.Request("GET", base + url if url.startswith("/") else url,
                                headers={"Authorization": f"Bearer {api_key}"},
                                extensions={"timeout": timeout})
        response = transport.handle_request(request)
        try:
            response.read()
        finally:
            response.close()
        return response

    return get


class DefinitionsCache:
    """Definitions by (service URL, hash of the key), each kept `ttl` seconds by `clock`;
    shared by the runs of a folder (one process, any thread)."""

    def __init__(self, ttl: float = TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: dict[tuple[str, str], tuple[float, Definitions]] = {}
        self._lock = threading.Lock()

    def get(self, base_url: str, api_key: str) -> Definitions | None:
        """The fresh entry of this service and key, or None."""
        with self._lock:
            entry = self._entries.get(_where(base_url, api_key))
        if entry is None or self.clock() - entry[0] >= self.ttl:
            return None
        return entry[1]

    def put(self, base_url: str, api_key: str, definitions: Definitions) -> None:
        """Keep a first page answered 200 or 403 (see the module's invariants)."""
        if definitions.status in (200, 403):
            with self._lock:
                self._entries[_where(base_url, api_key)] = (self.clock(), definitions)


def _where(base_url: str, api_key: str) -> tuple[str, str]:
    return base_url.rstrip("/"), hashlib.sha256(api_key.encode("utf-8")).hexdigest()
