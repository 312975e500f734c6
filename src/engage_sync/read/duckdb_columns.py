"""A DuckDB table's columns as the schema guard spells them, from DuckDB's own catalog.

SQLAlchemy's inspector on DuckDB goes through DuckDB's emulation of PostgreSQL's catalog
(several catalog queries and an enum lookup per call), which costs a short run more than its
read; `duckdb_columns()` answers the same question in one cheap query.

Invariants:
- the texts are exactly those the inspector gives on DuckDB (`source_schema._type_text` of its
  reflected types), so schemas recorded before compare equal: a type this table does not
  know, or a name the catalog does not show (a name spelled in another case, a temporary
  table), answers None and the caller asks the inspector as before;
- the inspector's spelling is kept with its blind spots (a TIMESTAMP WITH TIME ZONE reads as
  TIMESTAMP, a list or a struct as NULL): changing them would retype every recorded schema.
"""

from __future__ import annotations

import re

from sqlalchemy.engine import Connection

_SAME = {"BOOLEAN", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "VARCHAR", "DATE", "TIME",
         "TIMESTAMP", "INTERVAL", "UUID", "BIT"}
_RENAMED = {
    "TINYINT": "INTEGER", "HUGEINT": "INTEGER", "UTINYINT": "INTEGER", "USMALLINT": "INTEGER",
    "UINTEGER": "INTEGER", "UBIGINT": "INTEGER", "UHUGEINT": "INTEGER", "DOUBLE": "FLOAT",
    "JSON": "VARCHAR", "BLOB": "BYTEA", "TIME WITH TIME ZONE": "TIME",
    "TIMESTAMP WITH TIME ZONE": "TIMESTAMP", "TIMESTAMP_S": "TIMESTAMP",
    "TIMESTAMP_MS": "TIMESTAMP", "TIMESTAMP_NS": "TIMESTAMP", "BIGNUM": "NULL",
}
_DECIMAL = re.compile(r"^DECIMAL\((\d+),\s*(\d+)\)$")
_NESTED = re.compile(r"^(STRUCT|MAP|UNION)\(|\]$")

_QUERY = (
    "SELECT column_name, data_type FROM duckdb_columns() "
    "WHERE database_name = current_database() AND schema_name = coalesce(?, current_schema()) "
    "AND table_name = ? ORDER BY column_index")


def inspector_text(data_type: str) -> str | None:
    """DuckDB's type name → the inspector's text for it, or None for a type not known here."""
    if data_type in _SAME:
        return data_type
    if data_type in _RENAMED:
        return _RENAMED[data_type]
    if data_type.startswith("ENUM("):
        return "VARCHAR"
    decimal = _DECIMAL.match(data_type)
    if decimal:
        return f"NUMERIC({decimal[1]}, {decimal[2]})"
    return "NULL" if _NESTED.search(data_type) else None


def columns(conn: Connection, table: str, schema: str | None) -> dict[str, str] | None:
    """The table's (or view's) columns → their texts, or None when the inspector must answer."""
    out: dict[str, str] = {}
    for name, data_type in conn.exec_driver_sql(_QUERY, (schema, table)):
        text = inspector_text(str(data_type))
        if text is None:
            return None
        out[str(name)] = text
    return out or None
