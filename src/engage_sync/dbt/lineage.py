"""The parents of a node in the manifest, followed through `depends_on.nodes` recursively.

Invariant: every ancestor is returned once, whatever the shape of the graph (diamonds, and a
cycle, which dbt refuses but a hand-edited manifest might hold, end the walk instead of
looping); sources and nodes the manifest does not describe are returned as ids too, so a
failed source freshness check upstream is still seen.
"""

from __future__ import annotations

from engage_sync.dbt.manifest import Manifest


def ancestors(manifest: Manifest, unique_id: str) -> list[str]:
    """Every node `unique_id` depends on, directly or not, nearest first (breadth first)."""
    seen = {unique_id}
    order: list[str] = []
    frontier = [unique_id]
    while frontier:
        following = []
        for current in frontier:
            node = manifest.nodes.get(current)
            for parent in node.parents if node is not None else ():
                if parent not in seen:
                    seen.add(parent)
                    order.append(parent)
                    following.append(parent)
        frontier = following
    return order


def tests_of(manifest: Manifest, unique_ids: set[str]) -> dict[str, str]:
    """The tests (data tests, unit tests) that depend on any of `unique_ids`: test id → the
    id it tests (the first one it depends on of those)."""
    found = {}
    for node in manifest.nodes.values():
        if node.resource_type not in ("test", "unit_test"):
            continue
        for parent in node.parents:
            if parent in unique_ids:
                found[node.unique_id] = parent
                break
    return found
