"""The workspace's definitions (`deliver/definitions.py`): one pager that reads only as far as
asked, and a cache kept a few minutes by a clock, keyed by a hash of the key."""

from __future__ import annotations

from typing import Any

import httpx

from engage_sync.deliver.definitions import Definitions, DefinitionsCache

KEY = "secret-key-0123456789"
URL = "http://127.0.0.1:1/api"


def _page(names: list[str], next_url: str | None, status: int = 200) -> httpx.Response:
    headers = {"Link": f'<{next_url}>; rel="next"'} if next_url else {}
    return httpx.Response(status, json={"attributes": [
        {"name": n, "data_type": "String"} for n in names], "message": "success"},
        headers=headers)


PAGES = {"/p2": _page(["m", "n"], "/p3"), "/p3": _page(["x", "y"], None)}


def _walk(asked: list[str]) -> Any:
    def get(url: str) -> httpx.Response:
        asked.append(url)
        return PAGES[url]
    return get


def test_pages_are_read_only_as_far_as_a_wanted_name_may_be() -> None:
    asked: list[str] = []
    found = Definitions.from_answer(_page(["a", "b"], "/p2"))
    assert set(found.read(_walk(asked), {"a"})) == {"a", "b"} and asked == []
    assert "n" in found.read(_walk(asked), {"n"}) and asked == ["/p2"]
    assert set(found.read(_walk(asked))) == {"a", "b", "m", "n", "x", "y"}
    assert asked == ["/p2", "/p3"]
    found.read(_walk(asked))
    assert asked == ["/p2", "/p3"] and found.next_url is None


def test_a_403_is_kept_without_definitions_and_a_429_not_at_all() -> None:
    cache = DefinitionsCache()
    cache.put(URL, KEY, Definitions.from_answer(httpx.Response(429, json={})))
    assert cache.get(URL, KEY) is None
    cache.put(URL, KEY, Definitions.from_answer(httpx.Response(403, json={})))
    kept = cache.get(URL, KEY)
    assert kept is not None and kept.status == 403 and kept.read(_walk([])) == {}


def test_an_entry_lasts_its_ttl_by_the_clock_and_is_keyed_by_service_and_key() -> None:
    now = [1000.0]
    cache = DefinitionsCache(ttl=300, clock=lambda: now[0])
    found = Definitions.from_answer(_page(["a"], None))
    cache.put(URL + "/", KEY, found)
    now[0] += 299
    assert cache.get(URL, KEY) is found
    assert cache.get(URL, "another-key-0123456789") is None
    assert cache.get("http://127.0.0.1:2/api", KEY) is None
    now[0] += 1
    assert cache.get(URL, KEY) is None
    assert KEY not in repr(cache.__dict__)  # the key is never kept, only its hash
