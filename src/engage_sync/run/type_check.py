"""The workspace's types, checked before the first request: each attribute a run sends, against
the definitions `GET /custom_attributes` lists (`data_type`, `status`).

The definitions are the key check's answer (or a folder's cache of it), paged on by
`deliver/definitions.py` only as far as a sent attribute not found yet may be.
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
from typing import Any

import httpx
from sqlalchemy.engine import Engine

from engage_sync.config.integration import Integration
from engage_sync.deliver.definitions import Definitions, get_page
from engage_sync.errors import ConfigError
from engage_sync.kinds import kind_of
from engage_sync.read.array_lengths import longest
from engage_sync.read.plan import RunPlan
from engage_sync.read.source_schema import PAYLOAD_PREFIX
from engage_sync.state.store import StateStore

log = logging.getLogger(__name__)

_FITS: dict[str, tuple[str, ...]] = {
    # data_type → type texts (column types, upper-cased; JSON types lower-case) that fit it
    "String": ("CHAR", "TEXT", "STRING", "CLOB", "string"),
    "Number": ("INT", "DOUBLE", "FLOAT", "REAL", "DECIMAL", "NUMERIC", "NUMBER", "number"),
    "Boolean": ("BOOL", "boolean"),
    "Time": ("TIMESTAMP", "DATE", "TIME", "CHAR", "TEXT", "STRING", "string"),
    "Array": ("[]", "ARRAY", "LIST", "array"),
    "Object": ("JSON", "STRUCT", "MAP", "object"),
}


def check_types(plan: RunPlan, found: Definitions | None, state: StateStore,
                transport: httpx.BaseTransport, api_key: str, engine: Engine) -> None:
    """Raise ConfigError when a sent attribute's source type cannot be its `data_type`, or the
    attribute is blocklisted; warn once on a 403; return otherwise. Further pages read are
    added to `found` (a folder's next run reads them from there)."""
    integration = plan.integration
    if integration.attribute_types == "off" or found is None:
        return
    if found.status == 403:
        log.warning("integration %s: the API key may not read GET /custom_attributes (403): "
                    "the attributes' types were not checked; the run goes on", integration.name)
        return
    sent = sent_attributes(integration, state.source_schema(integration.name) or {})
    if found.status != 200 or not sent:
        return
    defined = found.read(get_page(transport, integration.service, api_key), set(sent))
    problems = [p for name, (column, have) in sent.items()
                if name in defined and (p := problem(name, column, have, defined[name]))]
    problems += too_long(plan, engine, sent, defined) if not problems else []
    if problems:
        raise ConfigError(
            f"integration {integration.name}: the workspace's attributes do not take what the "
            f"run would send: {'; '.join(problems)}; nothing was sent. Fix the mapping or the "
            "source (or set attribute_types: off to send anyway; the service drops such values)")


def sent_attributes(integration: Integration, schema: dict[str, str]
                    ) -> dict[str, tuple[str, str]]:
    """attribute name → (column or payload key, its type text) of what the run sends."""
    m = integration.mapping
    if not kind_of(integration).diffable:  # objects of attributes, not events or purchases
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
