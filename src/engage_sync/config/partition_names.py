"""How a partition of a partitioned run is named: the one owner of `<integration>#k/N`.

Partition k (from 0) of N of an integration's run is a run row named `<integration>#k/N`;
cursors, errors and records keep the integration's own name. Pure.
"""

from __future__ import annotations

import re

_SUFFIX = re.compile(r"#(?P<index>\d+)/(?P<count>\d+)$")


def label(index: int, count: int) -> str:
    """`k/N`, as logs and errors name a partition."""
    return f"{index}/{count}"


def suffix(index: int, count: int) -> str:
    return f"#{label(index, count)}"


def run_name(integration: str, index: int, count: int) -> str:
    """The partition's name in the runs table."""
    return integration + suffix(index, count)


def family_prefix(integration: str) -> str:
    """What every partition run name of the integration starts with."""
    return f"{integration}#"


def parse(name: str) -> tuple[int, int] | None:
    """(index, count) of a partition's run name, else None."""
    match = _SUFFIX.search(name)
    return None if match is None else (int(match["index"]), int(match["count"]))
