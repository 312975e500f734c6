"""A helper's whole records written over an integration's field record on PostgreSQL, by COPY.

Row-by-row INSERTs through the driver spend the helper's CPU on every record while the run
waits at its end; here SQLite renders each record as a line of COPY text itself, the lines go
to the server in large writes, and the server deduplicates and upserts in one statement: the
helper's CPU a record falls to a fraction, and the run's wait with it.

Invariants: one transaction (the caller's); of a user's records the last appended (highest
rowid) wins, over whatever the record held; no value is interpolated into SQL but the table's
name, which is the schema's and the helper's own."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy.engine import Connection

from engage_sync.state.field_store_sql import FIELDS_TABLE

INCOMING = "engage_fields_incoming"  # a temporary table, dropped at commit
CHUNK = 10_000  # lines read from SQLite per write to the server

# COPY's text format: columns split by tabs, bytea as \x and hex with its backslash doubled
_LINE = "'\\\\x' || hex(user_key) || char(9) || rowid || char(9) || '\\\\x' || hex(digests)"


def may_copy(conn: Connection) -> bool:
    """Whether this path applies: PostgreSQL through psycopg, and a role that may create
    temporary tables (some hardened databases revoke that from PUBLIC: the caller then
    inserts row by row)."""
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg" and bool(
        conn.exec_driver_sql(
            "SELECT has_database_privilege(current_database(), 'TEMPORARY')").scalar())


def copy_lines(source: sqlite3.Connection, table: str) -> Any:
    """A cursor over `table`'s records (user_key, digests; appended in acknowledgement order)
    as COPY text lines (user key, rowid, digests)."""
    return source.execute(f"SELECT {_LINE} FROM {table}")


def store_copied(dbapi_conn: Any, integration: str, source: sqlite3.Connection,
                 table: str) -> int:
    """The records of `table` in `source` over the integration's record, through the
    psycopg connection `dbapi_conn` (in the caller's transaction); returns how many records
    were applied (as the SQLite statement counts them: a user's earlier records too)."""
    lines = copy_lines(source, table)
    with dbapi_conn.cursor() as cur:
        cur.execute(f"CREATE TEMPORARY TABLE {INCOMING} (user_key bytea NOT NULL, "
                    "seq bigint NOT NULL, digests bytea NOT NULL) ON COMMIT DROP")
        with cur.copy(f"COPY {INCOMING} (user_key, seq, digests) FROM STDIN") as copy:
            while chunk := lines.fetchmany(CHUNK):
                copy.write("\n".join(line for (line,) in chunk) + "\n")
        copied = int(cur.rowcount)
        cur.execute(
            f"INSERT INTO {FIELDS_TABLE} (integration, user_key, digests) "
            f"SELECT DISTINCT ON (user_key) %s, user_key, digests FROM {INCOMING} "
            "ORDER BY user_key, seq DESC "
            "ON CONFLICT (integration, user_key) DO UPDATE SET digests = excluded.digests",
            (integration,))
        return copied
