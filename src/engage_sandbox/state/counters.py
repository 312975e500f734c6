"""The sandbox's tallies since the last reset (``GET /_sandbox/counters``): requests per path,
and the /users/track data accepted by the full or the lean path (counted the same way).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from engage_sandbox.handlers.track_validation import NON_ATTRIBUTE_KEYS, Ref


@dataclass
class Counters:
    """Tallies of accepted data since the last reset (see ``GET /_sandbox/counters``)."""

    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    events: int = 0
    purchases: int = 0
    events_by_user: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    attributes_processed: int = 0
    data_points: int = 0
    data_points_by_key: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    skipped_update_existing_only: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of ``GET /_sandbox/counters``."""
        return {
            "requests": dict(self.requests),
            "events": self.events,
            "purchases": self.purchases,
            "events_by_user": {u: dict(n) for u, n in self.events_by_user.items()},
            "attributes_processed": self.attributes_processed,
            "data_points": self.data_points,
            "data_points_by_key": {a: dict(n) for a, n in self.data_points_by_key.items()},
            "skipped_update_existing_only": self.skipped_update_existing_only,
        }


def ref_key(ref: Ref) -> str:
    """Counter key of a reference: the external_id, else ``kind:value``."""
    kind, value = ref
    if kind == "external_id":
        return str(value)
    if kind == "user_alias":
        return f"alias:{value['alias_label']}:{value['alias_name']}"
    return f"{kind}:{value}"


def count_attribute(counters: Counters, item: dict[str, Any], ref_kind: str) -> None:
    """Count one processed attributes object (also used by the lean path): each key but the
    identifiers and `_update_existing_only` is a billed data point, tallied per key too."""
    counters.attributes_processed += 1
    per_key = counters.data_points_by_key["attributes"]
    for k in item:
        if k not in NON_ATTRIBUTE_KEYS and k != ref_kind:
            counters.data_points += 1
            per_key[k] += 1


def count_event(counters: Counters, ref: Ref, name: str) -> None:
    """Count one accepted event (also used by the lean path)."""
    counters.events += 1
    counters.data_points += 1
    counters.data_points_by_key["events"][name] += 1
    counters.events_by_user[ref_key(ref)][name] += 1


def count_purchase(counters: Counters, product_id: str) -> None:
    """Count one accepted purchase (also used by the lean path), per product id too."""
    counters.purchases += 1
    counters.data_points += 1
    counters.data_points_by_key["purchases"][product_id] += 1
