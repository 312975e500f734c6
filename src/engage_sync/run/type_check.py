"""The workspace's types, checked before the first request: each attribute a run sends, against
the definitions `GET /custom_attributes` lists (`data_type`, `status`).

The first page is the key check's own answer (`deliver/key_check.py`), reused: no second call
for it; a further page (`Link: rel="next"`) is asked only for a sent attribute not found yet
whose name sorts after the last one seen (the pages are alphabetical).
What is checked: a mapped column's type as the warehouse names it (the schema guard's record,
`state/source_schemas.py`), or for the payload format the JSON types of a key in the guard's
sample, against the attribute's `data_type`; a `Blocklisted` attribute; a mapped array column
holding more items than the attribute's `array_length` (`read/array_lengths.py`: one aggregate
over the whole source). An attribute the workspace does not define yet is not checked (the
service creates it).

Invariants: runs after the schema guard and before any request; a mismatch is a ConfigError
naming the attribute, the column and both types (a `config_error` record, 0 requests); a 403
(a key without this read's permission) is one warning and the run goes on, as is any other
answer that is not a list of definitions; `attribute_types: off` skips the check.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import orjson
from sqlalchemy.engine import Engine

from engage_sync.config.integration import Integration
from engage_sync.errors import ConfigError
from engage_sync.read.array_lengths import longest
from engage_sync.read.plan import RunPlan
from engage_sync.read.source_schema import PAYLOAD_PREFIX
from engage_sync.state.store import StateStore

log = logging.getLogger(__name__)

MAX_PAGES = 200  # 10,000 definitions at 50 a page
_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_FITS: dict[str, tuple[str, ...]] = {
    # data_type → type texts (column types, upper-cased; JSON types lower-case) that fit it
    "String": ("CHAR", "TEXT", "STRING", "CLOB", "string"),
    "Number": ("INT", "DOUBLE", "FLOAT", "REAL", "DECIMAL", "NUMERIC", "NUMBER", "number"),
    "Boolean": ("BOOL", "boolean"),
    "Time": ("TIMESTAMP", "DATE", "TIME", "CHAR", "TEXT", "STRING", "string"),
    "Array": ("[]", "ARRAY", "LIST", "array"),
    "Object": ("JSON", "STRUCT", "MAP", "object"),
}


def check_types(plan: RunPlan, answer: httpx.Response | None, state: StateStore,
                transport: httpx.BaseTransport, api_key: str, engine: Engine) -> None:
    """Raise ConfigError when a sent attribute's source type cannot be its `data_type`, or the
    attribute is blocklisted; warn once on a 403; return otherwise."""
    integration = plan.integration
    if integration.attribute_types == "off" or answer is None:
        return
    if answer.status_code == 403:
        log.warning("integration %s: the API key may not read GET /custom_attributes (403): "
                    "the attributes' types were not checked; the run goes on", integration.name)
        return
    sent = sent_attributes(plan, state.source_schema(integration.name) or {})
    if answer.status_code != 200 or not sent:
        return
    defined = definitions(answer, transport, api_key, set(sent), integration)
    problems = [p for name, (column, have) in sent.items()
                if name in defined and (p := problem(name, column, have, defined[name]))]
    problems += too_long(plan, engine, sent, defined) if not problems else []
    if problems:
        raise ConfigError(
            f"integration {integration.name}: the workspace's attributes do not take what the "
            f"run would send: {'; '.join(problems)}; nothing was sent. Fix the mapping or the "
            "source (or set attribute_types: off to send anyway; the service drops such values)")


def sent_attributes(plan: RunPlan, schema: dict[str, str]) -> dict[str, tuple[str, str]]:
    """attribute name → (column or payload key, its type text) of what the run sends."""
    m = plan.integration.mapping
    if not plan.kind.diffable:  # objects of attributes, not events or purchases
        return {}
    if m is None:
        return {key[len(PAYLOAD_PREFIX):]: (key, text) for key, text in schema.items()
                if key.startswith(PAYLOAD_PREFIX)}
    by_case = {column.casefold(): (column, text) for column, text in schema.items()}
    return {name: by_case[column.casefold()] for column, name in m.attributes.items()
            if column.casefold() in by_case}


def problem(name: str, column: str, have: str, definition: dict[str, Any]) -> str | None:
    """Why `column` (of type `have`) cannot be sent as attribute `name`, or None."""
    if str(definition.get("status", "")).casefold() == "blocklisted":
        return f"attribute {name!r} (column {column}, {have}) is blocklisted in the workspace"
    want = str(definition.get("data_type") or "")
    fits = _FITS.get(want)
    if fits is None:
        return None
    # a payload key's JSON types; NULL alone: a type the warehouse's dialect does not name
    types = [t for t in have.split("|") if t.casefold() != "null"]
    if not types or all(any(f in t if f.islower() else f in t.upper() for f in fits)
                     for t in types):
        return None
    return f"attribute {name!r} is {want} in the workspace, but column {column} is {have}"


def too_long(plan: RunPlan, engine: Engine, sent: dict[str, tuple[str, str]],
             defined: dict[str, dict[str, Any]]) -> list[str]:
    """Mapped array columns holding more items than their attribute's `array_length`."""
    integration = plan.integration
    bounded = {name: (column, int(defined[name]["array_length"])) for name, (column, _) in
               sent.items() if integration.mapping is not None and name in defined
               and defined[name].get("array_length") is not None}
    if not bounded:
        return []
    most = longest(engine, plan.spec, sorted({column for column, _ in bounded.values()}))
    return [f"attribute {name!r} holds at most {limit} items in the workspace, but column "
            f"{column} ({sent[name][1]}) holds an array of {most[column]}"
            for name, (column, limit) in bounded.items() if most.get(column, 0) > limit]


def definitions(answer: httpx.Response, transport: httpx.BaseTransport, api_key: str,
                wanted: set[str], integration: Integration) -> dict[str, dict[str, Any]]:
    """name → definition: the key check's page, then the next pages only while a wanted name
    missing so far sorts after the last name seen (pages are alphabetical)."""
    found: dict[str, dict[str, Any]] = {}
    for _ in range(MAX_PAGES):
        try:
            page = {a["name"]: a for a in orjson.loads(answer.content)["attributes"]}
        except (orjson.JSONDecodeError, KeyError, TypeError):
            break
        found.update(page)
        link = _NEXT.search(answer.headers.get("link", ""))
        last = max(((n.casefold(), n) for n in page), default=("", ""))
        if link is None or not any((w.casefold(), w) > last for w in wanted - found.keys()):
            break
        answer = _get(transport, link.group(1), api_key, integration)
        if answer.status_code != 200:
            break
    return found


def _get(transport: httpx.BaseTransport, url: str, api_key: str, integration: Integration
         ) -> httpx.Response:
    if url.startswith("/"):
        url = integration.service.base_url.rstrip("/") + url
    timeout = httpx.Timeout(integration.service.timeout_seconds).as_dict()
    response = transport.handle_request(httpx.Request(
        "GET", url, headers={"Authorization": f"Bearer {api_key}"},
        extensions={"timeout": timeout}))
    try:
        response.read()
    finally:
        response.close()
    return response
