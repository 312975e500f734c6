"""A helper's kept records written over the field record (`StateStore.store_field_file`): on
SQLite by one attached statement, on PostgreSQL by COPY (`field_store_pg`). Both agree: a
user's last record wins, over what the record held; other integrations are untouched; any
bytes survive."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlalchemy as sa

from engage_sync.state.schema import fields
from engage_sync.state.store import StateStore

# every byte value, tab, newline and backslash among them (COPY's text format escapes those)
AWKWARD = bytes(range(256))


def _kept(path: Path, records: list[tuple[bytes, bytes]]) -> None:
    """A helper's file: records appended in the order they were acknowledged."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE log (user_key BLOB NOT NULL, digests BLOB NOT NULL)")
    db.executemany("INSERT INTO log VALUES (?, ?)", records)
    db.commit()
    db.close()


def _stored(state: StateStore) -> dict[tuple[str, bytes], bytes]:
    with state.engine.connect() as conn:
        rows = conn.execute(sa.select(fields.c.integration, fields.c.user_key,
                                      fields.c.digests)).all()
    return {(i, bytes(k)): bytes(d) for i, k, d in rows}


def test_the_last_record_of_a_user_wins_over_the_record(state_both: StateStore,
                                                         tmp_path: Path) -> None:
    key = [bytes([n]) * 16 for n in range(4)]
    with state_both.engine.begin() as conn:  # what the record held before
        conn.execute(fields.insert(), [
            {"integration": "users", "user_key": key[0], "digests": b"old"},
            {"integration": "users", "user_key": key[3], "digests": b"kept"},
            {"integration": "others", "user_key": key[0], "digests": b"theirs"}])
    _kept(tmp_path / "h.db", [(key[0], b"first"), (key[1], AWKWARD), (key[0], b"second"),
                              (key[2], b"\\x00\t\n"), (key[0], b"third")])
    written = state_both.store_field_file("users", str(tmp_path / "h.db"), "log")
    assert written == 5  # each record applied, a user's earlier ones too
    assert _stored(state_both) == {
        ("users", key[0]): b"third", ("users", key[1]): AWKWARD,
        ("users", key[2]): b"\\x00\t\n", ("users", key[3]): b"kept",
        ("others", key[0]): b"theirs"}


def test_nothing_kept_writes_nothing(state_both: StateStore, tmp_path: Path) -> None:
    _kept(tmp_path / "h.db", [])
    assert state_both.store_field_file("users", str(tmp_path / "h.db"), "log") == 0
    assert _stored(state_both) == {}
