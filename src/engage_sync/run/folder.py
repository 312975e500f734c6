"""The integrations of a folder, in the order their kinds must run (`Kind.rank`): identities
settle before data lands on them, and deletes come last so nothing re-creates a deleted user.
A file whose kind cannot be read runs after the data kinds, where it fails on its own."""

from __future__ import annotations

from pathlib import Path

import yaml

from engage_sync import kinds


def kind_named_in(path: Path) -> str:
    """The `kind` key of an integration file, read without validating the rest ('' if none)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return ""
    kind = raw.get("kind") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) else ""


def run_order(paths: list[Path]) -> list[Path]:
    """Integration files by their kind's rank, then by file name."""
    return [path for _, path in ranked(paths)]


def ranked(paths: list[Path]) -> list[tuple[int, Path]]:
    """Each file with its kind's rank, in run order (each file read once)."""
    return sorted(((kinds.rank(kind_named_in(p)), p) for p in paths),
                  key=lambda rp: (rp[0], rp[1].name))

