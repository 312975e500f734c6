"""dbt's node selection, the subset engage-sync needs: `tag:NAME`, `model:NAME` (or a bare
name), `path:GLOB`; several selectors separated by commas or spaces are a union.

Invariants: a selector selects nodes, never integrations (the caller maps integrations to their
nodes); an unknown method is a SelectorError naming it, so a typo never selects nothing in
silence; matches are case-sensitive for tags and paths (as dbt's) and case-insensitive for
model names (as warehouse relations are).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from engage_sync.dbt.manifest import Manifest, Node

METHODS = ("tag", "model", "path")


class SelectorError(ValueError):
    """A selector engage-sync does not understand."""


@dataclass(frozen=True)
class Selector:
    method: str
    value: str

    def matches(self, node: Node) -> bool:
        if self.method == "tag":
            return self.value in node.tags
        if self.method == "model":
            return node.name.lower() == self.value.lower()
        path = node.path.replace("\\", "/")
        prefix = self.value.rstrip("/")
        return fnmatchcase(path, self.value) or path.startswith(f"{prefix}/")


def parse_selectors(text: str) -> list[Selector]:
    """`"tag:braze, model:users path:models/marts/*"` → three selectors (a union)."""
    selectors = []
    for word in re.split(r"[,\s]+", text.strip()):
        if not word:
            continue
        method, sep, value = word.partition(":")
        if not sep:
            method, value = "model", word
        if method not in METHODS or not value:
            raise SelectorError(
                f"selector {word!r}: engage-sync understands {', '.join(m + ':' for m in METHODS)}"
                " (comma- or space-separated, a union)")
        selectors.append(Selector(method, value))
    if not selectors:
        raise SelectorError("an empty selection; give e.g. --select tag:braze")
    return selectors


def selected(manifest: Manifest, selectors: list[Selector]) -> set[str]:
    """The unique ids of the relations (models, seeds, snapshots) any selector matches."""
    return {n.unique_id for n in manifest.relations() if any(s.matches(n) for s in selectors)}
