"""One digest of a whole row's mapped attributes: the comparison's join key besides the
identifier, so that a run joins one number a user and digests attributes one by one only for
the users whose row changed.

Invariants:
- the row's text puts each attribute's text between separators, a NULL as its own marker, so
  rows that differ in any attribute (a NULL against an empty text included) differ in text;
- the hash is the warehouse's fastest 64-bit one where it is cheap (DuckDB's `hash`,
  PostgreSQL's `hashtextextended`), else the first 16 hex digits of the MD5. A row digest
  that no longer matches (an engine whose hash changed) costs time, never a wrong send: the
  attributes of a row whose digest differs are compared by their own MD5 digests, and only
  those that differ are sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import GenericFunction

from engage_sync.read.key_digest import key_md5

FIELD_END, NULL_MARK = "\x1f", "\x1e"


class row_hash(GenericFunction[Any]):
    """A 64-bit hash of a text (see the module's invariants); never NULL for a text."""

    inherit_cache = True


@compiles(row_hash)
def _row_hash_default(element: row_hash, compiler: SQLCompiler, **kw: Any) -> str:
    # The key digest's MD5 already compiles for every warehouse (BigQuery's TO_HEX, SQLite's
    # registered function); its first 16 hex digits are the 64 bits.
    return compiler.process(sa.func.substr(key_md5(*element.clauses), 1, 16), **kw)


@compiles(row_hash, "duckdb")
def _row_hash_duckdb(element: row_hash, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(hash({compiler.process(element.clauses, **kw)}) >> 1 AS BIGINT)"


@compiles(row_hash, "postgresql")
def _row_hash_postgresql(element: row_hash, compiler: SQLCompiler, **kw: Any) -> str:
    return f"hashtextextended({compiler.process(element.clauses, **kw)}, 0)"


def column_type(dialect_name: str) -> str:
    """The SQL type of a row digest column in this warehouse."""
    return "BIGINT" if dialect_name in ("duckdb", "postgresql") else "VARCHAR"


def row_text(columns: Sequence[sa.ColumnElement[Any]]) -> sa.ColumnElement[Any]:
    """The row's text: each attribute's text and a separator, or the NULL marker."""
    parts = [sa.func.coalesce(sa.cast(c, sa.String) + sa.literal(FIELD_END, sa.String),
                              sa.literal(NULL_MARK, sa.String)) for c in columns]
    text: sa.ColumnElement[Any] = parts[0]
    for part in parts[1:]:
        text = text + part
    return text


def row_digest(columns: Sequence[sa.ColumnElement[Any]]) -> sa.ColumnElement[Any]:
    return row_hash(row_text(columns))
