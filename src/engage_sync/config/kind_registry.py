"""The kinds an integration file may name, as the config layer needs to know them.

`Integration` checks a file's `kind` against this registry, reads the section the kind takes
and asks whether its rows can be split into partitions. The kinds themselves live above this
layer (`engage_sync.kinds`) and declare themselves here when that package is imported (its
built-in kinds, and `kinds.register` for a plugin's). Config never imports a kind: on first
use the registry loads the built-in kinds' package by its name, as a plugin (the way
SQLAlchemy's dialect registry loads a dialect), so parsing a file works whatever was imported
before, and the layers hold (kinds depend on config, never the other way).

Invariant: a kind is declared here if and only if `engage_sync.kinds` can build it (its
`register` and `unregister` keep both in step; tests/unit/kinds/test_kinds_config.py checks it).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol


class KindFacts(Protocol):
    """What config asks of a kind (a `kinds.Kind` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def section(self) -> str | None: ...

    def partition_column(self, integration: Any) -> str | None:
        """The column whose hash splits the rows of `integration` (a `config.Integration`:
        typed loosely, as this module sits under it) into partitions, or None."""
        ...


BUILT_IN = "engage_sync.kinds"
"""The package of the built-in kinds, loaded on first use (it declares its kinds here)."""

_DECLARED: dict[str, KindFacts] = {}


def _declared() -> dict[str, KindFacts]:
    if not _DECLARED:
        importlib.import_module(BUILT_IN)
    return _DECLARED


def declare(kind: KindFacts) -> None:
    _DECLARED[kind.name] = kind


def forget(name: str) -> None:
    _DECLARED.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_declared())


def facts(name: str) -> KindFacts:
    """Raises ValueError naming the known kinds."""
    declared = _declared()
    kind = declared.get(name)
    if kind is None:
        raise ValueError(f"unknown kind {name!r}; the kinds are {', '.join(declared)}")
    return kind
