"""Every kind of integration, one `Kind` object each, and the registry that names them.

Each kind declares itself to the config layer (`config.kind_registry`), which checks a file's
`kind` and its section without importing a kind.

Outside this package and the config schema (which names the kinds' sections) nothing branches
on a kind's name: the pipeline asks the integration's
`Kind` which columns to read, how to turn rows into items, how to pack them, which rate group
they draw from, whether they may be sent twice and where they run in a folder's order.

Adding a kind: one module that builds a `Kind`, and one line in `_BUILT_IN` (or a call to
`register` from a plugin or a test).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engage_sync.config import kind_registry
from engage_sync.kinds.audience import AUDIENCE
from engage_sync.kinds.base import Kind
from engage_sync.kinds.identity import ALIAS_RENAMES, DELETES, IDENTIFY_KIND, MERGES
from engage_sync.kinds.subscriptions import SUBSCRIPTIONS
from engage_sync.kinds.track import ATTRIBUTES, EVENTS, PURCHASES

if TYPE_CHECKING:
    from engage_sync.config.integration import Integration

__all__ = ["Kind", "kind_of", "names", "rank", "register", "unregister"]

_BUILT_IN = (IDENTIFY_KIND, MERGES, ALIAS_RENAMES, SUBSCRIPTIONS, ATTRIBUTES, AUDIENCE, EVENTS,
             PURCHASES, DELETES)
_REGISTRY: dict[str, Kind] = {k.name: k for k in _BUILT_IN}
for _kind in _BUILT_IN:
    kind_registry.declare(_kind)

UNKNOWN_RANK = 70
"""Where a file whose kind cannot be read runs in a folder: after the data kinds, before
deletes (it fails on its own, recorded as a config error)."""


def register(kind: Kind) -> None:
    """Add a kind; raises ValueError when the name is taken."""
    if kind.name in _REGISTRY:
        raise ValueError(f"a kind named {kind.name!r} is registered already")
    _REGISTRY[kind.name] = kind
    kind_registry.declare(kind)


def unregister(name: str) -> None:
    """Remove a kind added by `register` (tests); built-in kinds stay."""
    if any(k.name == name for k in _BUILT_IN):
        raise ValueError(f"{name!r} is a built-in kind")
    _REGISTRY.pop(name, None)
    kind_registry.forget(name)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get(name: str) -> Kind:
    """Raises KeyError naming the known kinds."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no kind {name!r}; the kinds are {', '.join(_REGISTRY)}") from None


def kind_of(integration: Integration) -> Kind:
    return get(integration.kind)


def rank(name: str) -> int:
    """A kind's place in a folder's run order; UNKNOWN_RANK for a name that is no kind."""
    kind = _REGISTRY.get(name)
    return kind.rank if kind is not None else UNKNOWN_RANK
