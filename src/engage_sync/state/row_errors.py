"""Row errors: where each is kept (its position) and the reasons engage-sync gives itself.

A row error is keyed by (run, kind, position), so recording one twice (after a resume) is a
no-op. This module is the one owner of how a position is written:
- a rejected row: its encoded cursor, `#n` for the n-th row of a tie (`cursor.ties`);
- an item of a request that failed, was in doubt or may be doubled: `req<n>:<k>`;
- a row of a request in flight when its run was killed: `crash:<encoded cursor>`;
- an error of an answer that names no item: `req<n>:unmapped:<k>`.
"""

from __future__ import annotations

from engage_sync.cursor.progress import Cursor, encode_cursor

IN_FLIGHT_AT_CRASH = "the run stopped while the request was in flight"
"""The reason of a row whose request was in flight when its run was killed."""

AFTER_DOUBT = ("sent again after an answer the service may have processed without "
               "answering (5xx, timeout or dropped connection): this row may be doubled")
AFTER_KILL = ("sent again after the run stopped while the request was in flight: this row "
              "may be doubled")


def reject_position(cursor: Cursor, ordinal: int) -> str:
    """A rejected row's position: its encoded cursor, `#ordinal` for a tie after the first."""
    text = encode_cursor(cursor) or ""
    return f"{text}#{ordinal}" if ordinal else text


def request_position(req_no: int, k: int) -> str:
    """The position of item `k` of request `req_no` (failed, in-doubt and doubled rows)."""
    return f"req{req_no}:{k}"


def crash_position(cursor: Cursor) -> str:
    """The position of a row whose request was in flight at a crash, named on resume."""
    return f"crash:{encode_cursor(cursor)}"


def unmapped_position(req_no: int, k: int) -> str:
    """The position of the k-th error of request `req_no`'s answer that names no item."""
    return f"req{req_no}:unmapped:{k}"
