"""The service's rate-limit headers, read (pure): `X-RateLimit-Limit`, `-Remaining`, `-Reset`
and `Retry-After`.

Names are matched case-insensitively (HTTP/2 and the lean transport send them in lower case,
a plain dict keeps whatever case it was given); a malformed, negative or NaN value reads as
absent, never as an error: the budget then keeps to its own figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from email.utils import parsedate_to_datetime

LIMIT = "x-ratelimit-limit"
REMAINING = "x-ratelimit-remaining"
RESET = "x-ratelimit-reset"
RETRY_AFTER = "retry-after"

_EPOCH_2001 = 1e9  # a reset below this is a number of seconds from now, not an epoch


def header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup (httpx.Headers already is; a plain dict may not be)."""
    value = headers.get(name)
    if value is None and not hasattr(headers, "multi_items"):
        for key, candidate in headers.items():
            if key.lower() == name:
                return candidate
    return value


def number(value: str | None) -> float | None:
    """A header's value as a number, or None when absent, malformed, NaN or negative."""
    if value is None:
        return None
    try:
        found = float(value.strip())
    except ValueError:
        return None
    return found if found == found and found >= 0 else None  # drop NaN and negatives


def parse_reset(headers: Mapping[str, str], now_epoch: float) -> float | None:
    """`X-RateLimit-Reset` as epoch seconds, or None. A small number is read as a delay."""
    value = number(header(headers, RESET))
    if value is None:
        return None
    return value if value >= _EPOCH_2001 else now_epoch + value


def parse_retry_after(headers: Mapping[str, str], now_epoch: float) -> float | None:
    """`Retry-After` (seconds or an HTTP date) as seconds to wait from now, or None."""
    raw = header(headers, RETRY_AFTER)
    if raw is None:
        return None
    seconds = number(raw)
    if seconds is not None:
        return seconds
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - now_epoch)
    except (TypeError, ValueError):
        return None
