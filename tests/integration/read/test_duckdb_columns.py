"""The schema guard's DuckDB column lookup gives exactly the inspector's texts, for every type
DuckDB has, for tables and views, in a named schema and under a mixed-case name, so schemas
recorded through the inspector compare equal; names it cannot place go back to the inspector."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.read import duckdb_columns
from engage_sync.read.source_schema import _type_text, describe
from engage_sync.read.source_spec import SourceSpec

TYPES = [
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
    "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL(18,3)", "DECIMAL(38,10)",
    "DECIMAL(4,1)", "VARCHAR", "VARCHAR(10)", "TEXT", "BLOB", "DATE", "TIME", "TIMETZ",
    "TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "INTERVAL",
    "UUID", "JSON", "BIT", "VARINT", "INTEGER[]", "VARCHAR[]", "STRUCT(x INTEGER)",
    "MAP(VARCHAR, INTEGER)", "INTEGER[3]", "UNION(a INTEGER, b VARCHAR)", "ENUM('a', 'b')",
]


@pytest.fixture()
def engine(tmp_path: Path) -> sa.Engine:
    engine = sa.create_engine(f"duckdb:///{tmp_path / 'w.duckdb'}")
    columns = ", ".join(f"c{i} {t}" for i, t in enumerate(TYPES))
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE every_type ({columns})")
        conn.exec_driver_sql("CREATE VIEW every_view AS SELECT * FROM every_type")
        conn.exec_driver_sql("CREATE SCHEMA analytics")
        conn.exec_driver_sql(f'CREATE TABLE analytics."Mixed_Case" ({columns})')
    return engine


def _inspected(conn: sa.Connection, table: str, schema: str | None) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sa.exc.SAWarning)  # "did not recognize type 'list'"
        found = sa.inspect(conn).get_columns(table, schema=schema)
    return {c["name"]: _type_text(c["type"]) for c in found}


@pytest.mark.parametrize(("table", "schema"), [
    ("every_type", None), ("every_view", None), ("every_type", "main"),
    ("Mixed_Case", "analytics")])
def test_the_catalog_lookup_spells_every_type_as_the_inspector(
        engine: sa.Engine, table: str, schema: str | None) -> None:
    with engine.connect() as conn:
        native = duckdb_columns.columns(conn, table, schema)
        assert native is not None and len(native) == len(TYPES)
        assert native == _inspected(conn, table, schema)
        assert list(native) == [f"c{i}" for i in range(len(TYPES))]  # the table's order


def test_names_the_catalog_cannot_place_go_back_to_the_inspector(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert duckdb_columns.columns(conn, "mixed_case", "analytics") is None  # other case
        assert duckdb_columns.columns(conn, "absent", None) is None
        conn.exec_driver_sql("CREATE TEMP TABLE scratch (a INTEGER)")
        assert duckdb_columns.columns(conn, "scratch", None) is None


def test_a_type_not_known_here_goes_back_to_the_inspector() -> None:
    assert duckdb_columns.inspector_text("GEOMETRY") is None
    assert duckdb_columns.inspector_text("DECIMAL(18,3)") == "NUMERIC(18, 3)"


def test_the_guard_describes_a_duckdb_table_as_the_inspector_did(engine: sa.Engine) -> None:
    spec = SourceSpec(integration="types", table="Mixed_Case", schema="analytics", query=None,
                      cursor_column="c23", key_columns=("c16",), columns=("c16", "c23"))
    with engine.connect() as conn:
        expected = _inspected(conn, "Mixed_Case", "analytics")
    assert describe(engine, spec, None) == expected
