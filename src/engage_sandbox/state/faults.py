"""Scripted faults: deterministic failures of chosen requests to chosen paths.

A rule (JSON/YAML)::

    {"path": "/users/track",          # exact request path, or "*" for every gated path
     "action": "429" | "500" | "502" | "503" | "504" | "delay" | "drop",
     "nth": [3, 7],                   # 1-based request numbers to that path since reset
     "share": 0.25, "seed": 1,        # or: this share of requests, deterministically
     "delay_seconds": 2.0,            # for "delay" (default 1.0)
     "process": false}                # 5xx only: process the request first, then fail

Neither ``nth`` nor ``share``: every request. Invariants: request numbers count every request
to the path that passed auth and the rate limit; whether request N of a path is hit depends
only on the rules, never on timing; the first matching rule wins.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

ACTIONS = ("429", "500", "502", "503", "504", "delay", "drop")


class FaultError(ValueError):
    """A fault rule is malformed."""


@dataclass(frozen=True)
class FaultRule:
    """One fault rule (see the module docstring)."""

    path: str
    action: str
    nth: tuple[int, ...] | None = None
    share: float | None = None
    seed: int = 0
    delay_seconds: float = 1.0
    process: bool = False

    def hits(self, path: str, n: int) -> bool:
        """Whether request number ``n`` to ``path`` is hit by this rule."""
        if self.path not in ("*", path):
            return False
        if self.nth is not None:
            return n in self.nth
        if self.share is not None:
            return random.Random(f"{self.seed}:{path}:{n}").random() < self.share
        return True

    def to_json(self) -> dict[str, Any]:
        """The rule as given (tuple as list), for ``GET /_sandbox/faults``."""
        out = asdict(self)
        if self.nth is not None:
            out["nth"] = list(self.nth)
        return out


def parse_rule(raw: Any) -> FaultRule:
    """Validate one rule; raises :class:`FaultError` naming the bad field."""
    if not isinstance(raw, dict):
        raise FaultError("a fault rule must be an object")
    unknown = set(raw) - {"path", "action", "nth", "share", "seed", "delay_seconds", "process"}
    if unknown:
        raise FaultError(f"unknown fault rule fields: {sorted(unknown)}")
    path, action = raw.get("path"), str(raw.get("action"))
    if not isinstance(path, str) or not (path == "*" or path.startswith("/")):
        raise FaultError("'path' must be a path starting with '/' or '*'")
    if action not in ACTIONS:
        raise FaultError(f"'action' must be one of {list(ACTIONS)}")
    nth, share = raw.get("nth"), raw.get("share")
    if nth is not None and share is not None:
        raise FaultError("give 'nth' or 'share', not both")
    if nth is not None:
        if isinstance(nth, int) and not isinstance(nth, bool):
            nth = [nth]
        if not isinstance(nth, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in nth
        ):
            raise FaultError("'nth' must be a list of request numbers >= 1")
    if share is not None and (
        not isinstance(share, int | float) or isinstance(share, bool) or not 0 <= share <= 1
    ):
        raise FaultError("'share' must be a number from 0 to 1")
    delay = raw.get("delay_seconds", 1.0)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
        raise FaultError("'delay_seconds' must be a number >= 0")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise FaultError("'seed' must be an integer")
    return FaultRule(
        path=path,
        action=action,
        nth=tuple(nth) if nth is not None else None,
        share=float(share) if share is not None else None,
        seed=seed,
        delay_seconds=float(delay),
        process=bool(raw.get("process", False)),
    )


def parse_rules(raw: Any) -> list[FaultRule]:
    """A list of rules (a single object is taken as a list of one)."""
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise FaultError("faults must be a list of rules")
    return [parse_rule(r) for r in raw]


class FaultBook:
    """The active rules and the per-path request numbers."""

    def __init__(self, rules: list[FaultRule] | None = None) -> None:
        self.rules: list[FaultRule] = list(rules or [])
        self._seen: dict[str, int] = defaultdict(int)

    def reset(self, rules: list[FaultRule] | None = None) -> None:
        """Replace the rules and restart request numbering."""
        self.rules = list(rules or [])
        self._seen.clear()

    def next(self, path: str) -> tuple[int, FaultRule | None]:
        """Number the next request to ``path`` and return it with the rule that hits it."""
        self._seen[path] += 1
        n = self._seen[path]
        for rule in self.rules:
            if rule.hits(path, n):
                return n, rule
        return n, None
