"""Dataset names and namespaces of OpenLineage events: never a credential, a token or a query
string (pure, `adapters/lineage_names.py`); and when lineage is on (`adapters/lineage.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from engage_sync.adapters import lineage
from engage_sync.adapters.lineage_names import (
    scrub,
    service_namespace,
    warehouse_dataset_name,
    warehouse_namespace,
)

SECRET = "s3cr3t-Value"


@pytest.mark.parametrize(("url", "namespace", "name"), [
    (f"postgresql+psycopg://sync:{SECRET}@db.example.com/analytics?sslmode=require",
     "postgres://db.example.com:5432", "analytics.public.users"),
    (f"redshift+redshift_connector://sync:{SECRET}@c1.abc.eu-west-1.redshift.amazonaws.com:5439/dev",
     "redshift://c1.abc.eu-west-1.redshift.amazonaws.com:5439", "dev.public.users"),
    (f"snowflake://sync:{SECRET}@myorg-acct/SALES/CRM?warehouse=WH&role=R",
     "snowflake://myorg-acct", "SALES.CRM.users"),
    ("bigquery://my-project/crm", "bigquery", "my-project.crm.users"),
    (f"databricks://token:{SECRET}@dbc-1.cloud.databricks.com?http_path=/sql/1&catalog=main"
     "&schema=crm", "databricks://dbc-1.cloud.databricks.com", "main.crm.users"),
    ("duckdb:////data/wh.duckdb", "duckdb:///data/wh.duckdb", "wh.public.users"),
])
def test_namespaces_and_names_hold_no_credential(url: str, namespace: str, name: str) -> None:
    parsed = sa.make_url(url)
    assert warehouse_namespace(parsed) == namespace
    assert warehouse_dataset_name(parsed, "users", None, "public") == name
    assert SECRET not in warehouse_namespace(parsed) + warehouse_dataset_name(
        parsed, "users", None, "public")


def test_a_relative_duckdb_file_is_named_by_its_absolute_path() -> None:
    assert warehouse_namespace(sa.make_url("duckdb:///wh.duckdb")) == (
        f"duckdb://{Path('wh.duckdb').resolve()}")


def test_the_source_schema_or_a_qualified_table_wins_over_the_default() -> None:
    url = sa.make_url("postgresql://h/db")
    assert warehouse_dataset_name(url, "users", "crm", "public") == "db.crm.users"
    assert warehouse_dataset_name(url, "crm.users", None, "public") == "db.crm.users"


def test_the_service_namespace_drops_user_password_query_and_fragment() -> None:
    assert service_namespace(f"https://u:{SECRET}@rest.example.com:8443/v1/?k={SECRET}#x") == (
        "https://rest.example.com:8443/v1")
    assert service_namespace("http://127.0.0.1:8787/") == "http://127.0.0.1:8787"


def test_scrub_hides_each_secret_and_ignores_short_or_missing_ones() -> None:
    assert scrub(f"a {SECRET} b {SECRET}x", [SECRET, None, "ab"]) == "a *** b ***x"


@pytest.mark.parametrize(("environ", "on"), [
    ({}, False),
    ({"OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": "/tmp/x"}, False),  # no transport type
    ({"OPENLINEAGE_URL": "http://127.0.0.1:5000"}, True),
    ({"OPENLINEAGE_CONFIG": "/etc/openlineage.yml"}, True),
    ({"OPENLINEAGE__TRANSPORT__TYPE": "file"}, True),
    ({"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE_DISABLED": "true"}, False),
])
def test_lineage_is_on_only_when_the_environment_says_so(environ: dict[str, str],
                                                         on: bool) -> None:
    assert lineage.enabled(environ) is on
