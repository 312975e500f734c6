"""Property: every request a kind builds from random rows (mostly valid, often NULL, some
junk) is accepted by the sandbox over loopback, every row is accounted for, and no reject
reason holds a value of the row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engage_sandbox.state.settings import RateLimit, SandboxSettings
from engage_sandbox.web.server import run_sandbox
from engage_sync import kinds
from tests.kind_helpers import MARK, SUBS, integration, run


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """The sandbox over loopback, with the subscription and identity limits out of the way."""
    settings = SandboxSettings(rate_limits={"subscription": RateLimit(10**6, 1),
                                            "identity": RateLimit(10**6, 1)})
    with run_sandbox(settings=settings) as handle, httpx.Client(
            base_url=handle.base_url, timeout=30,
            headers={"Authorization": f"Bearer {handle.api_key}"}) as http:
        yield http

junk = st.one_of(
    st.none(), st.just(""), st.just(" "), st.text(max_size=6).map(lambda s: MARK + s),
    st.sampled_from([MARK + "a@x.io", "+15551234567", "subscribed", "crm", MARK + "@", "+0123"]),
    st.integers(0, 99),
)
emails = st.sampled_from(["a", "b", "c"]).map(lambda s: f"{MARK}{s}@x.io")
phones = st.sampled_from(["+15551234567", "+4915112345678", "+447700900123"])
GOOD = {"EMAIL": emails, "E": emails, "ME": emails, "PHONE": phones, "KP": phones,
        "STATE": st.sampled_from(["subscribed", "unsubscribed"]),
        "GROUP_ID": st.sampled_from(["g1", "g2"]), "L": st.just("crm"), "KL": st.just("crm"),
        "ALIAS_LABEL": st.just("crm")}
OPTIONAL = {"EXTERNAL_ID", "EMAIL", "PHONE", "ALIAS_NAME", "BRAZE_ID", "N", "E", "M", "ME",
            "KN", "KP"}


def cells(column: str) -> st.SearchStrategy[Any]:
    """Mostly valid values of the column, often NULL where NULL is allowed, some junk."""
    good = GOOD.get(column, st.sampled_from(["a", "b", "c", "d"]).map(lambda s: MARK + s))
    null = st.none() if column in OPTIONAL or column == "ALIAS_LABEL" else good
    return st.integers(0, 9).flatmap(
        lambda k: junk if k == 0 else null if k < 5 else good)

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("subscriptions", SUBS, {"row_key": ["ID"]}),
    ("subscriptions", {**SUBS, "endpoint": "v1"}, {"row_key": ["ID"]}),
    ("deletes", {"identifiers": ["external_id", "user_alias", "platform_id", "email"],
                 "prioritization": ["identified", "most_recently_updated"]}, {"row_key": ["ID"]}),
    ("identify", {"alias_name": "N", "alias_label": "L", "email": "E",
                  "prioritization": ["identified"]}, {"row_key": ["ID"]}),
    ("merges", {"merge": {"external_id": "M", "email": "ME", "prioritization": ["identified"]},
                "keep": {"alias_name": "KN", "alias_label": "KL", "phone": "KP",
                         "prioritization": ["unidentified"]}}, {"row_key": ["ID"]}),
    ("alias_renames", {}, {}),
]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CASES), data=st.data(), n=st.integers(1, 120),
       limit=st.integers(1, 50))
def test_random_rows_are_accounted_for_and_every_request_is_accepted(
    client: httpx.Client, case: tuple[str, dict[str, Any], dict[str, Any]],
    data: st.DataObject, n: int, limit: int
) -> None:
    kind, section, extra = case
    i = integration(kind, section, service={"limits": {"ids_per_request": limit}}, **extra)
    names = [c for c in kinds.kind_of(i).columns(i) if c != "ID"]
    columns: dict[str, list[Any]] = {
        c: [str(x) if isinstance(x, int) else x
            for x in data.draw(st.lists(cells(c), min_size=n, max_size=n))] for c in names}
    result, batches = run(i, {"ID": list(range(n)), **columns})
    event(f"{kind}: {'some' if result.items else 'no'} valid rows")
    for reject in result.rejects:
        assert MARK not in reject.reason
    assert [x for b in batches for x in b.items] == result.items
    for batch in batches:
        assert len(batch.items) <= limit
        answer = client.post(batch.endpoint, content=batch.body,
                             headers={"Content-Type": "application/json"})
        assert answer.status_code < 400, (answer.text, batch.body)
