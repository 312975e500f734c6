"""One digest of a whole row's mapped attributes: the comparison's join key besides the
identifier, so that a run joins one number a user and digests attributes one by one only for
the users whose row changed.

Invariants:
- rows that differ in any attribute (a NULL against an empty text included) are hashed from
  different input: on DuckDB its `hash` of the values themselves, position by position (it
  hashes a NULL as its own value, and never builds the row's text, the costliest part);
  elsewhere the row's text, each attribute's text between separators and a NULL as its own
  marker, hashed by PostgreSQL's `hashtextextended`, else the first 16 hex digits of its MD5;
- a row digest that no longer matches (an engine whose hash changed, a column retyped, a
  snapshot of a version that hashed otherwise) costs one run's time, never a wrong send: the
  attributes of a row whose digest differs are compared by their own MD5 digests, only those
  that differ are sent, and the snapshot's row digest of a user with nothing to send is
  brought up to date (`snapshot/pending_table.py`).
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


class row_digest(GenericFunction[Any]):
    """A 64-bit digest of the row made of its arguments (see the module's invariants); never
    NULL."""

    inherit_cache = True


@compiles(row_digest)
def _row_digest_default(element: row_digest, compiler: SQLCompiler, **kw: Any) -> str:
    # The key digest's MD5 already compiles for every warehouse (BigQuery's TO_HEX, SQLite's
    # registered function); its first 16 hex digits are the 64 bits.
    text = row_text(list(element.clauses))
    return compiler.process(sa.func.substr(key_md5(text), 1, 16), **kw)


@compiles(row_digest, "duckdb")
def _row_digest_duckdb(element: row_digest, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(hash({compiler.process(element.clauses, **kw)}) >> 1 AS BIGINT)"


@compiles(row_digest, "postgresql")
def _row_digest_postgresql(element: row_digest, compiler: SQLCompiler, **kw: Any) -> str:
    text = row_text(list(element.clauses))
    return f"hashtextextended({compiler.process(text, **kw)}, 0)"


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
