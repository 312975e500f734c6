"""What the leave check of a cursor integration keeps between runs (`engage_leave_checks`):
when it last ran, the users its source held then, and the leavers of a check under way.

The users are kept as one Arrow table of the identifier columns (compressed IPC), written and
read whole: the check compares them with the source's keys as Arrow, never row by row.
Invariants: `members` and `checked_at` change together, once a check's leavers are settled
(`finish`); `pending` is set before the check's first request and cleared with that change,
so a check killed in between resumes on the same leavers, numbered the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from engage_sync.cursor.progress import Cursor, encode_cursor
from engage_sync.state.field_codec import user_key
from engage_sync.state.fields import CHUNK, fold
from engage_sync.state.row_errors import LEFT, insert_errors
from engage_sync.state.schema import fields, leave_checks


@dataclass(frozen=True)
class LeaveState:
    checked_at: datetime | None = None
    members: pa.Table | None = None
    pending: pa.Table | None = None


def to_blob(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_blob(blob: bytes | None) -> pa.Table | None:
    if blob is None:
        return None
    with pa.ipc.open_stream(pa.py_buffer(bytes(blob))) as reader:
        return reader.read_all()


def load(engine: Engine, integration: str) -> LeaveState:
    """The integration's leave state (empty before its first check)."""
    t = leave_checks
    with engine.connect() as conn:
        row = conn.execute(sa.select(t.c.checked_at, t.c.members, t.c.pending).where(
            t.c.integration == integration)).first()
    if row is None:
        return LeaveState()
    return LeaveState(row.checked_at, from_blob(row.members), from_blob(row.pending))


def last_check(engine: Engine, integration: str) -> tuple[datetime | None, bool]:
    """(when the last check was done, whether one is under way), without reading the users:
    what a run asks to know whether a check is due."""
    t = leave_checks
    with engine.connect() as conn:
        row = conn.execute(sa.select(t.c.checked_at, t.c.pending.is_not(None)).where(
            t.c.integration == integration)).first()
    return (None, False) if row is None else (row[0], bool(row[1]))


def _put(engine: Engine, integration: str, values: dict[str, object]) -> None:
    t = leave_checks
    with engine.begin() as conn:
        done = conn.execute(t.update().where(t.c.integration == integration).values(**values))
        if not done.rowcount:
            conn.execute(t.insert().values(integration=integration, **values))


def begin(engine: Engine, integration: str, pending: pa.Table, members: pa.Table) -> None:
    """The check's leavers, and the users to remember after it, kept before its first
    request."""
    _put(engine, integration, {"pending": to_blob(pending), "members": to_blob(members)})


def finish(engine: Engine, integration: str, at: datetime,
           members: pa.Table | None = None) -> None:
    """The check done at `at`: nothing under way (and the users to remember, if given)."""
    values: dict[str, object] = {"checked_at": at, "pending": None}
    if members is not None:
        values["members"] = to_blob(members)
    _put(engine, integration, values)


def forget_users(engine: Engine, integration: str, users: list[str]) -> None:
    """Drop the field record of users the service no longer holds values of ours for (their
    attributes cleared, or the users deleted), the log folded first: a user who comes back is
    sent whole, and the next check finds nothing of ours on them."""
    if not users:
        return
    keys = sorted({user_key(u) for u in users})
    with engine.begin() as conn:
        fold(conn, integration)
        for i in range(0, len(keys), CHUNK):
            conn.execute(fields.delete().where(fields.c.integration == integration,
                                               fields.c.user_key.in_(keys[i:i + CHUNK])))


def record_leavers(engine: Engine, run_id: str, integration: str,
                   rows: Sequence[tuple[Cursor, str]], reason: str) -> None:
    """The run's acknowledged leavers as (position: the pending number then the key values,
    row key), each once (recording one again is a no-op), for the write-back's outcomes."""
    if not rows:
        return
    with engine.begin() as conn:
        insert_errors(conn, run_id, integration, LEFT,
                      [(str(encode_cursor(position)), key, reason) for position, key in rows])
