"""Durations as config files write them: '90s', '5m', '2h', '1d' or a number of seconds."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: Any) -> timedelta:
    """'90s', '5m', '2h', '1d' or a number of seconds → timedelta; raises ValueError."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=float(value))
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError("not a duration; write it like 90s, 5m, 2h or 1d")
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
