"""Cursor paging of the dashboard lists, and the `Link` header that points to a page's
neighbours.

Contract choices where the interface says "not shown":
- Cursors are opaque base64url tokens naming the list and an offset; a token that does not
  decode, names another list or points past the end is `400 Invalid cursor`.
- `Link` holds absolute URLs, `<url>; rel="prev", <url>; rel="next"`. `prev` is present when
  the page does not start at the first record (so never on a call without cursor), `next` when
  records follow; with no more than one page in total the header is absent.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from starlette.requests import Request


def encode_cursor(scope: str, offset: int) -> str:
    """An opaque cursor naming `scope` (the list being paged) and a record offset."""
    return base64.urlsafe_b64encode(f"{scope}\n{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str, scope: str) -> int:
    """The offset inside a cursor made for `scope`; raises ValueError on anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError("undecodable cursor") from exc
    cursor_scope, _, offset_text = raw.rpartition("\n")
    if cursor_scope != scope or not offset_text.isdigit():
        raise ValueError("cursor of another list")
    return int(offset_text)


@dataclass(frozen=True)
class Page:
    """One page of a list: the slice bounds and the offsets of its neighbours (or None)."""

    start: int
    stop: int
    prev: int | None
    next: int | None


def page_of(total: int, offset: int, size: int) -> Page:
    """The page of `size` records starting at `offset`; raises ValueError past the end.

    Offset 0 is always valid (an empty list has one empty page).
    """
    if offset < 0 or (offset > 0 and offset >= total):
        raise ValueError("offset out of range")
    stop = min(offset + size, total)
    prev = max(offset - size, 0) if offset > 0 else None
    return Page(offset, stop, prev, stop if stop < total else None)


def link_header(request: Request, page: Page, scope: str) -> str | None:
    """The `Link` header value for `page`, or None when it has no neighbours."""
    base = str(request.url.replace(query=""))
    links = []
    if page.prev is not None:
        links.append(f'<{base}?cursor={encode_cursor(scope, page.prev)}>; rel="prev"')
    if page.next is not None:
        links.append(f'<{base}?cursor={encode_cursor(scope, page.next)}>; rel="next"')
    return ", ".join(links) or None


def paged(request: Request, scope: str, total: int, size: int) -> Page | None:
    """The page asked for by the request's `cursor`, or None when the cursor is invalid."""
    cursor = request.query_params.get("cursor")
    try:
        offset = 0 if cursor is None else decode_cursor(cursor, scope)
        return page_of(total, offset, size)
    except ValueError:
        return None
