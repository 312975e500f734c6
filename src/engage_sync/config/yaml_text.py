"""YAML as users write it: `${VAR}` references read as text wherever a value may stand.

In YAML's flow style (`{backend: redis, url: ${RATE_BUDGET_URL}}`) the braces of a reference
are flow indicators, and a file copied from the README was refused. Each reference is swapped
for a plain token before parsing and swapped back in every string after, so a reference reads
as the same text in block style, flow style, quoted or not. Pure.

Invariant: the loaded value holds exactly the references the text held, each where it stood;
the expansion from the environment happens later, where the value is used (`secrets.expand`).
"""

from __future__ import annotations

from typing import Any

import yaml

from engage_sync.config.secrets import REFERENCE


def load(text: str) -> Any:
    """`yaml.safe_load` of `text`, `${VAR}` references kept as text (raises yaml.YAMLError)."""
    protected, refs = _protect(text)
    return _restore(yaml.safe_load(protected), refs)


def load_all(text: str) -> list[Any]:
    """Every document of `text`, as `load` reads one."""
    protected, refs = _protect(text)
    return [_restore(doc, refs) for doc in yaml.safe_load_all(protected)]


def _protect(text: str) -> tuple[str, dict[str, str]]:
    refs: dict[str, str] = {}

    def token(match: Any) -> str:
        name = f"engagesyncref{len(refs)}x"
        refs[name] = match.group(0)
        return name

    return REFERENCE.sub(token, text), refs


def _restore(value: Any, refs: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, ref in refs.items():
            if name in value:
                value = value.replace(name, ref)
        return value
    if isinstance(value, list):
        return [_restore(v, refs) for v in value]
    if isinstance(value, dict):
        return {_restore(k, refs): _restore(v, refs) for k, v in value.items()}
    return value
