"""The kinds an integration file may name, as the config layer needs to know them.

`Integration` checks a file's `kind` against this registry, reads the section the kind takes
and asks whether its rows can be split into partitions. The kinds themselves live above this
layer (`engage_sync.kinds`) and declare themselves here when that package is imported (its
built-in kinds, and `kinds.register` for a plugin's), so config never imports a kind.

Invariant: a kind is declared here if and only if `engage_sync.kinds` can build it (its
`register` and `unregister` keep both in step; tests/unit/test_kinds_config.py checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from engage_sync.config.integration import Integration


class KindFacts(Protocol):
    """What config asks of a kind (a `kinds.Kind` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def section(self) -> str | None: ...

    def partition_column(self, integration: Integration) -> str | None: ...


_DECLARED: dict[str, KindFacts] = {}


def declare(kind: KindFacts) -> None:
    _DECLARED[kind.name] = kind


def forget(name: str) -> None:
    _DECLARED.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_DECLARED)


def facts(name: str) -> KindFacts:
    """Raises ValueError naming the known kinds, or saying that none is declared (the kinds
    package was not imported: a bug of the caller, never of a file)."""
    kind = _DECLARED.get(name)
    if kind is None:
        known = ", ".join(_DECLARED) or "(none declared: import engage_sync.kinds first)"
        raise ValueError(f"unknown kind {name!r}; the kinds are {known}")
    return kind
