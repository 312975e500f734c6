"""A helper's kept records written over the field record (`StateStore.store_field_file`): on
SQLite by one attached statement, on PostgreSQL by COPY (`field_store_pg`), or row by row where
temporary tables are not allowed. All agree: a user's last record wins, over what the record
held; other integrations are untouched; any bytes survive."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.state.field_store_pg import may_copy
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


def test_a_role_without_the_temporary_privilege_writes_row_by_row(state_both: StateStore,
                                                                   tmp_path: Path) -> None:
    """Some hardened databases revoke TEMPORARY from PUBLIC: COPY into a temporary table is
    then not possible, and the records go in by INSERT, with the same result."""
    if state_both.engine.dialect.name != "postgresql":
        pytest.skip("a PostgreSQL privilege")
    url = state_both.engine.url
    schema = str(url.query["options"]).rsplit("=", 1)[1]
    role = f"limited_{time.monotonic_ns() % 10**9}"
    database = url.database
    with state_both.engine.begin() as conn:
        for sql in (f"CREATE ROLE {role} LOGIN",
                    f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}",
                    f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}",
                    f"GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
                    f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC"):
            conn.exec_driver_sql(sql)
    limited = StateStore(sa.create_engine(url.set(username=role)))
    try:
        with limited.engine.connect() as conn:
            assert not may_copy(conn)
        with state_both.engine.connect() as conn:
            assert may_copy(conn)  # the owner keeps it
        _kept(tmp_path / "h.db", [(b"k" * 16, b"first"), (b"k" * 16, AWKWARD)])
        assert limited.store_field_file("users", str(tmp_path / "h.db"), "log") == 2
        assert _stored(state_both) == {("users", b"k" * 16): AWKWARD}
    finally:
        limited.engine.dispose()
        with state_both.engine.begin() as conn:
            conn.exec_driver_sql(f"GRANT TEMPORARY ON DATABASE {database} TO PUBLIC")
            conn.exec_driver_sql(f"DROP OWNED BY {role}")
            conn.exec_driver_sql(f"DROP ROLE {role}")
