"""The warehouses that cannot be reached from here: Snowflake, BigQuery, Redshift, Databricks.

The window's SQL is compiled with each one's own SQLAlchemy dialect and its text checked:
identifier quoting, the compound-cursor predicate, the ORDER BY, schema-qualified tables and
wrapped queries, and bound (never inlined) time-zone-aware parameters. Payload columns of each
warehouse's JSON type are read from recorded driver values (what each driver returns for a
VARIANT, JSON, STRUCT or SUPER column) and must reach the service with exactly their own keys.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from engage_sync.config.files import parse_integration
from engage_sync.cursor.window import Window
from engage_sync.kinds.track_transform import transform_batch
from engage_sync.read.driver_rows import rows_to_batch
from engage_sync.read.extract import SourceSpec, build_query

SPEC = SourceSpec(integration="users", table="USERS_SYNC", schema="ANALYTICS", query=None,
                  cursor_column="UPDATED_AT", key_columns=("EXTERNAL_ID",),
                  columns=("UPDATED_AT", "EXTERNAL_ID", "PAYLOAD"))
START = (datetime(2026, 1, 1, 8, 30, tzinfo=UTC), "u00042")
SIGNPOST = datetime(2026, 2, 1, tzinfo=UTC)

DIALECTS = {  # name → (driver name, identifier quote)
    "snowflake": ("snowflake", '"'),
    "bigquery": ("bigquery", "`"),
    "redshift": ("redshift+psycopg2", '"'),
    "databricks": ("databricks", "`"),
}


def dialect(name: str) -> sa.Dialect:
    return URL.create(DIALECTS[name][0]).get_dialect()()


@pytest.mark.parametrize("name", list(DIALECTS))
def test_the_window_query_compiles_for_each_warehouse(name: str) -> None:
    q = DIALECTS[name][1]
    query = build_query(SPEC, {c: c for c in SPEC.columns}, Window(START, SIGNPOST))
    compiled = query.compile(dialect=dialect(name))
    sql = " ".join(str(compiled).split())
    u, e, p = (f"{q}{c}{q}" for c in SPEC.columns)
    assert f"SELECT {u} AS {u}, {e} AS {e}, {p} AS {p}" in sql
    assert f"FROM {q}ANALYTICS{q}.{q}USERS_SYNC{q}" in sql
    # (UPDATED_AT, EXTERNAL_ID) > START, spelled with OR/AND: no row-value comparison
    assert f"WHERE ({u} > " in sql and f" OR {u} = " in sql and f" AND {e} > " in sql
    assert f"AND {u} <= " in sql
    assert sql.endswith(f"ORDER BY {u}, {e} NULLS FIRST")  # a NULL key sorts first (nulls.py)
    assert "2026" not in sql  # values are bound, never inlined
    values = list(compiled.params.values())
    assert START[0] in values and SIGNPOST in values and "u00042" in values
    assert all(v.tzinfo is UTC for v in values if isinstance(v, datetime))


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_configured_query_is_wrapped_as_a_subquery(name: str) -> None:
    spec = replace(SPEC, table=None, schema=None,
                   query="SELECT * FROM ANALYTICS.USERS_SYNC WHERE ACTIVE")
    sql = " ".join(str(build_query(spec, {c: c for c in spec.columns},
                                   Window(None, SIGNPOST)).compile(dialect=dialect(name))).split())
    assert "FROM (SELECT * FROM ANALYTICS.USERS_SYNC WHERE ACTIVE) AS " in sql


# --- payload columns as each driver returns them -------------------------------------------

T = datetime(2026, 1, 1, tzinfo=UTC)
RECORDED: dict[str, list[Any]] = {
    # snowflake-connector-python: VARIANT / OBJECT columns come as indented JSON text
    "snowflake VARIANT": ['{\n  "plan": "pro",\n  "score": 1.5\n}', '{\n  "plan": "free"\n}',
                          None],
    # google-cloud-bigquery: JSON columns come parsed; STRUCT columns as dicts, NUMERIC as
    # Decimal, TIMESTAMP as aware datetimes
    "bigquery JSON": [{"plan": "pro", "score": 1.5}, {"plan": "free"}, None],
    "bigquery STRUCT": [{"plan": "pro", "score": Decimal("1.5")},
                        {"plan": "free", "renewal": datetime(2026, 3, 1, tzinfo=UTC)}, None],
    # sqlalchemy-redshift (psycopg2): SUPER columns come as JSON text
    "redshift SUPER": ['{"plan":"pro","score":1.5}', '{"plan":"free"}', None],
    # databricks-sql-connector: STRUCT columns come as dicts
    "databricks STRUCT": [{"plan": "pro", "score": 1.5}, {"plan": "free"}, None],
}
EXPECTED = [{"external_id": "u1", "plan": "pro", "score": 1.5},
            {"external_id": "u2", "plan": "free"}]


@pytest.mark.parametrize("column", list(RECORDED))
def test_payload_columns_reach_the_service_with_exactly_their_own_keys(column: str) -> None:
    payloads = RECORDED[column]
    rows = [(T, f"u{i + 1}", p) for i, p in enumerate(payloads)]
    batch = rows_to_batch(rows, SPEC.columns)
    integration = parse_integration({"kind": "attributes", "source": {"table": "t"}},
                                    file="users.yaml")
    result = transform_batch(integration, batch, 0)
    sent = [orjson.loads(i.blob) for i in result.items]
    if column == "bigquery STRUCT":
        assert sent == [EXPECTED[0], {**EXPECTED[1], "renewal": "2026-03-01T00:00:00+00:00"}]
    else:
        assert sent == EXPECTED  # no `"score": null` for the row that has no score
    assert [r.reason for r in result.rejects] == ["PAYLOAD is missing (NULL)"]


def test_objects_become_json_documents_never_python_reprs() -> None:
    objects = rows_to_batch([(T, "u1", {"a": 1}), (T, "u2", "plain")], SPEC.columns)
    assert [json.loads(v) for v in objects.column(2).to_pylist()] == [{"a": 1}, "plain"]
    mixed = rows_to_batch([(T, "u1", "plain"), (T, "u2", {"a": [1, Decimal("2.5")]})],
                          SPEC.columns)  # Arrow refuses the mix: text, objects as JSON
    assert mixed.column(2).to_pylist() == ["plain", '{"a":[1,2.5]}']


PARTITION_SQL = {  # each warehouse's md5 → leading 8 hex digits → integer → mod N
    "snowflake": "MOD((POSITION(SUBSTR(MD5(COALESCE(CAST(\"EXTERNAL_ID\" AS VARCHAR), '')), "
                 "1, 1) IN '0123456789abcdef') - 1) * 268435456 + ",
    "bigquery": "MOD(CAST(CONCAT('0x', SUBSTR(TO_HEX(MD5(COALESCE(CAST(`EXTERNAL_ID` AS "
                "STRING), ''))), 1, 8)) AS INT64), ",
    "redshift": "MOD(STRTOL(SUBSTRING(MD5(COALESCE(CAST(\"EXTERNAL_ID\" AS VARCHAR), '')), "
                "1, 8), 16), ",
    "databricks": "MOD(CAST(CONV(SUBSTR(MD5(COALESCE(CAST(`EXTERNAL_ID` AS STRING), '')), 1, "
                  "8), 16, 10) AS BIGINT), ",
}


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_partition_is_selected_in_each_warehouse_by_the_md5_of_the_user_key(name: str
                                                                              ) -> None:
    """Each partition reads only its own users: the predicate is the warehouse's own SQL, with
    the partition and the count bound, next to the window's predicate."""
    spec = replace(SPEC, partition_column="EXTERNAL_ID")
    query = build_query(spec, {c: c for c in spec.columns},
                        Window(START, SIGNPOST, partition=(2, 4)))
    compiled = query.compile(dialect=dialect(name))
    sql = " ".join(str(compiled).split())
    assert PARTITION_SQL[name] in sql, sql
    assert sorted(v for v in compiled.params.values() if isinstance(v, int)) == [2, 4]
    unpartitioned = build_query(spec, {c: c for c in spec.columns}, Window(START, SIGNPOST))
    assert "MD5" not in str(unpartitioned.compile(dialect=dialect(name))).upper()
