"""Key columns that hold payload, ordered by their digest.

Payload-format events and purchases key rows by (identifier, PAYLOAD) by default. A row's
cursor is stored in the state database (cursors, progress, journal, error positions), so a
key column that holds payload must never stand in a cursor as its value. The rule: such a
column (`Integration.hidden_key_columns`) is ordered, compared and stored as the hex MD5 of
its text, computed by the warehouse (`sql_digest`), so SQL and Python order the same values;
the batch carries it as an extra column named `label(name)`. A cursor stored by an older
version holds the raw value at that place: `migrate` turns it into its digest, which is
exactly what the warehouse computes for the same text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import GenericFunction

from engage_sync.cursor.null_keys import NULL_KEY

if TYPE_CHECKING:
    from engage_sync.config.integration import Integration
    from engage_sync.state.store import StateStore


class key_md5(GenericFunction[str]):
    """md5 of a column's text as 32 lower-case hex digits, NULL for NULL."""

    type = sa.String()
    inherit_cache = True


@compiles(key_md5)
def _md5_default(element: key_md5, compiler: SQLCompiler, **kw: Any) -> str:
    return f"md5(CAST({compiler.process(element.clauses, **kw)} AS VARCHAR))"


@compiles(key_md5, "postgresql")
def _md5_postgresql(element: key_md5, compiler: SQLCompiler, **kw: Any) -> str:
    return f"md5(CAST({compiler.process(element.clauses, **kw)} AS TEXT))"


@compiles(key_md5, "bigquery")
def _md5_bigquery(element: key_md5, compiler: SQLCompiler, **kw: Any) -> str:
    return f"TO_HEX(MD5(CAST({compiler.process(element.clauses, **kw)} AS STRING)))"


@compiles(key_md5, "sqlite")
def _md5_sqlite(element: key_md5, compiler: SQLCompiler, **kw: Any) -> str:
    return f"engage_md5({compiler.process(element.clauses, **kw)})"


def label(name: str) -> str:
    """The batch column that carries the digest of key column `name`."""
    return f"{name}__md5"


def python_md5(value: Any) -> str:
    return hashlib.md5(str(value).encode("utf-8"), usedforsecurity=False).hexdigest()


def sqlite_md5(dbapi_conn: Any, _record: Any) -> None:
    """Give a SQLite warehouse connection the digest and partition functions (SQLite has no
    md5)."""
    dbapi_conn.create_function(
        "engage_md5", 1, lambda v: None if v is None else python_md5(v), deterministic=True)
    dbapi_conn.create_function("engage_bucket", 2, python_bucket, deterministic=True)


def migrate(cursor: Sequence[Any] | None, key_columns: Sequence[str],
            digested: frozenset[str]) -> tuple[Any, ...] | None:
    """A stored cursor with the raw value of a digested key column (an older version) →
    the same cursor with that value's digest; a cursor already digested is returned as is."""
    if cursor is None or not digested:
        return None if cursor is None else tuple(cursor)
    values = list(cursor)
    for n, name in enumerate(key_columns, start=1):
        value = values[n] if n < len(values) else None
        if name in digested and value is not NULL_KEY and value is not None \
                and not _is_digest(value):
            values[n] = python_md5(value)
    return tuple(values)


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 32 and all(
        c in "0123456789abcdef" for c in value)


# --- partitions: a user's partition from the MD5 of its key, in the warehouse -----

BUCKET_HEX_DIGITS = 8
"""A partition is int(first 8 hex digits of md5(user key text)) mod N. Never change this: a
killed partition resumed by a later version must read the same users."""


class key_bucket(GenericFunction[int]):
    """key_bucket(column, n): the partition of a row, 0 <= p < n, from md5 of the column's text
    (NULL counts as the empty text, so a row with a NULL key is still read by one partition)."""

    type = sa.BigInteger()
    inherit_cache = True


def _bucket_parts(element: key_bucket, compiler: SQLCompiler, cast: str, **kw: Any
                  ) -> tuple[str, str]:
    column, n = list(element.clauses)
    text = f"COALESCE(CAST({compiler.process(column, **kw)} AS {cast}), '')"
    return text, compiler.process(n, **kw)


@compiles(key_bucket)
def _bucket_default(element: key_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    # DuckDB (and the generic form): a '0x…' string casts to an integer
    text, n = _bucket_parts(element, compiler, "VARCHAR", **kw)
    return (f"mod(CAST(('0x' || substr(md5({text}), 1, {BUCKET_HEX_DIGITS})) AS BIGINT),"
            f" {n})")


@compiles(key_bucket, "postgresql")
def _bucket_postgresql(element: key_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    text, n = _bucket_parts(element, compiler, "TEXT", **kw)
    return (f"mod(('x' || lpad(substr(md5({text}), 1, {BUCKET_HEX_DIGITS}), 16, '0'))"
            f"::bit(64)::bigint, {n})")


@compiles(key_bucket, "snowflake")
def _bucket_snowflake(element: key_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    # digit by digit (POSITION of each hex digit): the same number as TO_NUMBER(…, 'XXXXXXXX'),
    # which the Snowflake emulator the tests run (fakesnow) does not evaluate
    text, n = _bucket_parts(element, compiler, "VARCHAR", **kw)
    digits = " + ".join(
        f"(POSITION(SUBSTR(MD5({text}), {k + 1}, 1) IN '0123456789abcdef') - 1)"
        f" * {16 ** (BUCKET_HEX_DIGITS - 1 - k)}" for k in range(BUCKET_HEX_DIGITS))
    return f"MOD({digits}, {n})"


@compiles(key_bucket, "bigquery")
def _bucket_bigquery(element: key_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    text, n = _bucket_parts(element, compiler, "STRING", **kw)
    return (f"MOD(CAST(CONCAT('0x', SUBSTR(TO_HEX(MD5({text})), 1, {BUCKET_HEX_DIGITS}))"
            f" AS INT64), {n})")


@compiles(key_bucket, "redshift")
def _bucket_redshift(element: key_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    text, n = _bucket_parts(element, compiler, "VARCHAR", **kw)
    return f"MOD(STRTOL(SUBSTRING(MD5({text}), 1, {BUCKET_HEX_DIGITS}), 16), {n})"


@compiles(key_bucket, "databricks")
def _bucket_databricks(element: key_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    text, n = _bucket_parts(element, compiler, "STRING", **kw)
    return (f"MOD(CAST(CONV(SUBSTR(MD5({text}), 1, {BUCKET_HEX_DIGITS}), 16, 10) AS BIGINT),"
            f" {n})")


@compiles(key_bucket, "sqlite")
def _bucket_sqlite(element: key_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    column, n = list(element.clauses)
    return f"engage_bucket({compiler.process(column, **kw)}, {compiler.process(n, **kw)})"


def python_bucket(value: Any, n: int) -> int:
    """What `key_bucket` computes for a value whose text in the warehouse is `str(value)`
    (None: the empty text)."""
    text = "" if value is None else str(value)
    return int(python_md5(text)[:BUCKET_HEX_DIGITS], 16) % n


def stored_cursor(state: StateStore, integration: Integration) -> tuple[Any, ...] | None:
    """The integration's stored cursor, in this version's form (`migrate`): the one way a run
    or a coordinator reads it."""
    return migrate(state.cursor(integration.name), integration.key_columns,
                   integration.hidden_key_columns)
