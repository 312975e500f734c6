"""What a change to an integration file changes, read from the two versions alone (pure):
the attributes it maps added and removed, and the caps it raises.

Invariants: attributes are the service's names (`mapping.attributes` values), compared
exactly, as the service keys them; a cap is any of `max_deletes`, `max_leaves` and
`max_data_points` the model has, and it is raised when the new limit lets more through
(a number above the old one, a share of the same unit above the old one, or no limit where
there was one); a cap whose units changed (a count to a share) is reported as raised, since
whether it lets more through depends on data the file does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engage_sync.config.integration import Integration

CAPS = ("max_deletes", "max_leaves", "max_data_points")


@dataclass(frozen=True)
class CapRaised:
    cap: str
    old: Any
    new: Any


@dataclass(frozen=True)
class FileDiff:
    attributes_added: list[str] = field(default_factory=list)
    attributes_removed: list[str] = field(default_factory=list)
    caps_raised: list[CapRaised] = field(default_factory=list)


def attributes_of(integration: Integration | None) -> dict[str, str]:
    """Mapped attributes: the service's attribute name → the column it is read from."""
    if integration is None or integration.mapping is None:
        return {}
    return {name: column for column, name in integration.mapping.attributes.items()}


def caps_of(integration: Integration | None) -> dict[str, Any]:
    """The caps the model has, by name (None: no limit)."""
    if integration is None:
        return {}
    return {cap: getattr(integration, cap) for cap in CAPS if cap in type(integration).model_fields}


def compare(old: Integration | None, new: Integration | None) -> FileDiff:
    """`old` None: a new file; `new` None: a removed one."""
    was, now = attributes_of(old), attributes_of(new)
    raised = []
    before = caps_of(old)
    for cap, limit in caps_of(new).items():
        if cap in before and _raised(before[cap], limit):
            raised.append(CapRaised(cap, before[cap], limit))
    return FileDiff(sorted(set(now) - set(was)), sorted(set(was) - set(now)), raised)


def _raised(old: Any, new: Any) -> bool:
    if old == new:
        return False
    if new is None:
        return True
    if old is None:
        return False
    if isinstance(old, int | float) and isinstance(new, int | float):
        return new > old
    if isinstance(old, str) and isinstance(new, str) and old.endswith("%") == new.endswith("%"):
        try:
            return float(new.rstrip("%")) > float(old.rstrip("%"))
        except ValueError:
            return True
    return True
