"""What an API handler answers: an HTTP status and a JSON body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """A handler's answer: HTTP status and JSON body."""

    status: int
    body: dict[str, Any]


def fatal(message: str, errors: list[Any] | None = None) -> Outcome:
    """A 400 with the fatal message repeated in ``errors`` (spec: Errors 1)."""
    return Outcome(400, {"message": message, "errors": [message] if errors is None else errors})
