"""dbt's `manifest.json` as the nodes engage-sync reads: models, seeds and snapshots, each with
its relation, tags, file path and the nodes it depends on.

Invariants: only `nodes` and `sources` of the manifest are read, and only the keys of dbt's
published manifest schema (v12 and earlier versions that share them), so a manifest of a newer
dbt with more keys reads the same; a node's relation is matched case-insensitively because
warehouses fold unquoted names (DuckDB and Snowflake to different cases).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

DEFAULT_MANIFEST = PurePath("target") / "manifest.json"
"""Where dbt writes its manifest, under the project's folder."""
RELATION_TYPES = ("model", "seed", "snapshot")
"""The resource types that are tables or views an integration can read."""


class ManifestError(ValueError):
    """The manifest is not one dbt wrote, or a name in it cannot be resolved."""


@dataclass(frozen=True)
class Node:
    unique_id: str
    name: str
    resource_type: str
    schema: str
    alias: str
    relation_name: str
    tags: tuple[str, ...]
    path: str
    """`original_file_path`: the file under the project, e.g. models/marts/users.sql."""
    parents: tuple[str, ...]
    """`depends_on.nodes`: unique ids of models, seeds, snapshots and sources."""

    @property
    def identifier(self) -> str:
        """The table's own name in the warehouse: the last part of the relation, else the
        alias, else the name."""
        parts = relation_parts(self.relation_name)
        return parts[-1] if parts else (self.alias or self.name)


@dataclass(frozen=True)
class Manifest:
    nodes: Mapping[str, Node]
    """Every node that has a `depends_on` (tests included), by unique id."""

    def relations(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.resource_type in RELATION_TYPES]

    def model_named(self, name: str) -> Node:
        """The model (or seed or snapshot) called `name`; ManifestError when none or several."""
        found = [n for n in self.relations() if n.name.lower() == name.lower()]
        if len(found) != 1:
            what = "no model" if not found else f"{len(found)} models"
            raise ManifestError(f"{what} named {name!r} in the manifest")
        return found[0]

    def for_table(self, table: str, schema: str | None = None) -> list[Node]:
        """The nodes whose relation is `table` (optionally `schema.table` or
        `database.schema.table`), compared case-insensitively part by part from the right;
        `schema`, when given, must be the node's schema too."""
        wanted = [p.lower() for p in relation_parts(table)]
        if schema:
            wanted = [schema.lower(), *wanted[-1:]] if len(wanted) == 1 else wanted
        found = []
        for node in self.relations():
            have = [p.lower() for p in relation_parts(node.relation_name)] or [
                node.schema.lower(), node.identifier.lower()]
            if have[-len(wanted):] == wanted or (
                    len(wanted) == 1 and node.alias.lower() == wanted[0]):
                found.append(node)
        return found


_PART = re.compile(r'"([^"]*)"|`([^`]*)`|\[([^\]]*)\]|([^.\s"`\[\]]+)')


def relation_parts(relation: str | None) -> list[str]:
    """`"db"."main"."users"` → ['db', 'main', 'users']; quotes of any warehouse removed."""
    if not relation:
        return []
    return [next(g for g in m.groups() if g is not None) for m in _PART.finditer(relation)]


def parse_manifest(raw: Any) -> Manifest:
    """A manifest as loaded from JSON → Manifest; ManifestError when it has no `nodes`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("nodes"), dict):
        raise ManifestError("not a dbt manifest (no 'nodes' mapping)")
    nodes: dict[str, Node] = {}
    for unique_id, body in raw["nodes"].items():
        if isinstance(body, dict):
            nodes[unique_id] = _node(unique_id, body)
    return Manifest(nodes)


def _node(unique_id: str, body: dict[str, Any]) -> Node:
    depends = body.get("depends_on") or {}
    name = str(body.get("name") or unique_id.rsplit(".", 1)[-1])
    return Node(
        unique_id=unique_id, name=name,
        resource_type=str(body.get("resource_type") or unique_id.split(".", 1)[0]),
        schema=str(body.get("schema") or ""), alias=str(body.get("alias") or name),
        relation_name=str(body.get("relation_name") or ""),
        tags=tuple(str(t) for t in body.get("tags") or ()),
        path=str(body.get("original_file_path") or body.get("path") or ""),
        parents=tuple(str(p) for p in depends.get("nodes") or ()))
