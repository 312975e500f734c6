"""The seed: API keys, SCIM tokens and the dashboard-side objects the API only reads.

Invariant: a :class:`Seed` is immutable once loaded; a reset of the sandbox never changes it.
Raises :class:`SeedError` with the offending key when the file is malformed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

ALL_PERMISSIONS = "*"


class SeedError(ValueError):
    """The seed file or mapping is malformed."""


@dataclass(frozen=True)
class Seed:
    """Parsed seed. ``raw`` is the whole mapping, for the dashboard/messaging modules."""

    raw: dict[str, Any] = field(default_factory=dict)
    api_keys: dict[str, frozenset[str]] = field(default_factory=dict)
    scim_tokens: frozenset[str] = frozenset()

    def section(self, name: str, default: Any = None) -> Any:
        """One top-level section of the seed, or ``default``."""
        return self.raw.get(name, default)

    def key_allows(self, key: str, permission: str) -> bool | None:
        """True/False whether ``key`` holds ``permission``; None when the key is unknown."""
        perms = self.api_keys.get(key)
        if perms is None:
            return None
        return ALL_PERMISSIONS in perms or permission in perms


def demo_seed_text() -> str:
    """The packaged demo seed (``engage_sandbox/demo-seed.yaml``)."""
    return resources.files("engage_sandbox").joinpath("demo-seed.yaml").read_text("utf-8")


def load_seed(source: str | Path | dict[str, Any] | None) -> Seed:
    """Load a seed from a YAML path, a mapping, or (None) the packaged demo seed."""
    if source is None:
        raw: Any = yaml.safe_load(demo_seed_text())
    elif isinstance(source, dict):
        raw = source
    else:
        path = Path(source)
        try:
            raw = yaml.safe_load(path.read_text("utf-8"))
        except OSError as exc:
            raise SeedError(f"cannot read seed file {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise SeedError(f"seed file {path} is not valid YAML: {exc}") from exc
    return parse_seed(raw or {})


def parse_seed(raw: Any) -> Seed:
    """Validate the parts of the seed the core uses (api_keys, scim_tokens)."""
    if not isinstance(raw, dict):
        raise SeedError("seed must be a mapping at the top level")
    keys: dict[str, frozenset[str]] = {}
    for i, entry in enumerate(raw.get("api_keys") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise SeedError(f"api_keys[{i}] must be a mapping with a string 'key'")
        perms = entry.get("permissions", [])
        if not isinstance(perms, list) or not all(isinstance(p, str) for p in perms):
            raise SeedError(f"api_keys[{i}].permissions must be a list of strings")
        keys[entry["key"]] = frozenset(perms)
    tokens = raw.get("scim_tokens") or []
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise SeedError("scim_tokens must be a list of strings")
    return Seed(raw=raw, api_keys=keys, scim_tokens=frozenset(tokens))
