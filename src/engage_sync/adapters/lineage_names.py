"""Where a run reads and writes, named as OpenLineage names datasets (pure, no I/O).

Invariants: a namespace holds a scheme and a host and port (or a file path), never a user, a
password, a token or a query string; a dataset name holds database, schema and table names
only. `scrub` replaces given secret values in a text, longest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

import sqlalchemy as sa

# OpenLineage's scheme for a SQLAlchemy backend, where the two differ
_SCHEMES = {"postgresql": "postgres", "mssql": "sqlserver"}
_DEFAULT_PORTS = {"postgresql": 5432, "redshift": 5439, "mysql": 3306, "mssql": 1433}
_FILE_BACKENDS = ("duckdb", "sqlite")
_NAME_QUERY_KEYS = ("catalog", "schema")  # the only query keys a name may take from a URL


def warehouse_namespace(url: sa.URL) -> str:
    """`postgres://host:5432`, `duckdb:///abs/path.duckdb`, `snowflake://account`,
    `bigquery`: scheme and place only."""
    backend = url.get_backend_name()
    scheme = _SCHEMES.get(backend, backend)
    if backend in _FILE_BACKENDS:
        database = url.database or ""
        where = str(Path(database).resolve()) if database not in ("", ":memory:") else "memory"
        return f"{scheme}://{where}"
    if backend == "bigquery":
        return "bigquery"
    port = url.port or _DEFAULT_PORTS.get(backend)
    host = url.host or "localhost"
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


def warehouse_dataset_name(url: sa.URL, table: str, schema: str | None,
                           default_schema: str | None) -> str:
    """`database.schema.table` as far as the URL and the source name them: the source's
    schema, else the table's own qualifier, else the connection's default schema."""
    backend = url.get_backend_name()
    catalog, url_schema = _catalog_and_schema(url, backend)
    if schema is None and "." not in table:
        schema = url_schema or default_schema
    parts = [catalog, schema, table]
    return ".".join(p for p in parts if p)


def _catalog_and_schema(url: sa.URL, backend: str) -> tuple[str | None, str | None]:
    database = url.database or None
    if backend in _FILE_BACKENDS:  # DuckDB names a file's catalog after its stem
        return (Path(database).stem if database and database != ":memory:" else "memory"), None
    query = {k: v for k, v in url.query.items() if k in _NAME_QUERY_KEYS}
    if backend == "databricks":
        return _text(query.get("catalog")), _text(query.get("schema"))
    if backend == "bigquery":  # bigquery://project/dataset
        return url.host, database
    if database and "/" in database:  # snowflake://account/database/schema
        first, _, rest = database.partition("/")
        return first, rest or None
    return database, None


def _text(value: str | tuple[str, ...] | None) -> str | None:
    return value[0] if isinstance(value, tuple) else value


def service_namespace(base_url: str) -> str:
    """The service's base URL without user, password, query or fragment."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every secret value of at least 4 characters replaced by `***`."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
