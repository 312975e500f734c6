"""Lean /users/track: shape limits and counting only, no profile store, no body log.

Invariant: a lean answer is what the full path would answer for a body whose items are all
valid (same status, same ``*_processed`` figures); items are counted, never validated.
"""

from __future__ import annotations

from typing import Any

from engage_sandbox.handlers.outcome import Outcome, fatal
from engage_sandbox.handlers.track_validation import ARRAYS, NO_VALID, Ref, shape
from engage_sandbox.state.counters import Counters, count_attribute, count_event, count_purchase
from engage_sandbox.state.settings import SandboxSettings

_REF_ORDER = ("external_id", "user_alias", "platform_id", "email", "phone")


def _quick_ref(item: dict[str, Any]) -> Ref:
    for kind in _REF_ORDER:
        value = item.get(kind)
        if value is not None:
            return kind, value
    return "unknown", "?"


def handle_track_lean(body: Any, settings: SandboxSettings, counters: Counters) -> Outcome:
    """Count a /users/track body. Items that are not objects are ignored, not reported."""
    arrays = shape(body, settings)
    if isinstance(arrays, Outcome):
        return arrays
    if not any(arrays.values()):
        return fatal(NO_VALID, [])
    result: dict[str, Any] = {"message": "success"}
    for name in ARRAYS:
        items = arrays.get(name)
        if items is None:
            continue
        objects = [item for item in items if isinstance(item, dict)]
        result[f"{name}_processed"] = len(objects)
        if name == "attributes":
            for item in objects:
                count_attribute(counters, item, _quick_ref(item)[0])
        elif name == "events":
            for item in objects:
                count_event(counters, _quick_ref(item), str(item.get("name")))
        else:
            for item in objects:
                count_purchase(counters, str(item.get("product_id")))
    return Outcome(201, result)
