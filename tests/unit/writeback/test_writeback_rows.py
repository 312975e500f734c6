"""The write-back's rows (pure): key values decoded as the source holds them, one
column per key column typed after its values, the outcome named, never a payload value."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.schema import CreateTable

from engage_sync.cursor.null_keys import NULL_KEY
from engage_sync.state.row_errors import cursor_key_values, reject_position
from engage_sync.state.writebacks import OutcomeRow, _values
from engage_sync.writeback.tables import (
    add_column_sql,
    as_text,
    column_type,
    outcome_row,
    outcomes_table,
    runs_table,
)

AT = datetime(2026, 1, 1, 12, 0)
CURSOR = (AT, 42, "a|b#1", NULL_KEY)


def test_stored_key_values_decode_to_the_source_values() -> None:
    assert _values(cursor_key_values(reject_position(CURSOR, 1))) == (42, "a|b#1", None)
    assert _values(None) is None


@pytest.mark.parametrize("values, kind", [
    ([None, 7], sa.BigInteger), (["x"], sa.Text), ([Decimal("1.5")], sa.Numeric),
    ([AT], sa.DateTime), ([date(2026, 1, 1)], sa.Date), ([True], sa.Boolean),
    ([1.5], sa.Float), ([None], sa.Text), ([], sa.Text)])
def test_a_key_column_is_typed_after_its_values(values: list[object], kind: type) -> None:
    assert isinstance(column_type(values), kind)


def test_an_outcome_row_has_one_column_per_key_column_and_names_its_outcome() -> None:
    row = OutcomeRow("duplicate", "u1|sha1:0123456789abcdef", ("u1", "0" * 32), "resent",
                     2, "pending", datetime(2026, 1, 1, 13, 0, tzinfo=UTC))
    built = outcome_row("run-1", "events", ("external_id", "payload"), row, AT)
    assert built["external_id"] == "u1" and built["payload"] == "0" * 32
    assert (built["outcome"], built["tries"], built["retry_state"]) == (
        "possibly_duplicated", 2, "pending")
    assert built["recorded_at"] == datetime(2026, 1, 1, 13, 0)  # naive UTC
    unknown = outcome_row("run-1", "events", ("external_id", "payload"),
                          OutcomeRow("unmapped", "request 3", None, "no item", None, None, AT),
                          AT)
    assert (unknown["external_id"], unknown["payload"], unknown["outcome"]) == (
        None, None, "unmapped_error")


@pytest.mark.parametrize("driver", ["duckdb", "postgresql+psycopg", "snowflake", "bigquery",
                                    "redshift+psycopg2", "databricks"])
def test_the_tables_compile_in_each_warehouse_dialect(driver: str) -> None:
    dialect = URL.create(driver).get_dialect()()
    keys = [("EVENT_ID", column_type(["e1"])), ("n", column_type([7])),
            ("at", column_type([AT])), ("amount", column_type([Decimal("1.5")]))]
    md = sa.MetaData()
    runs, outcomes = runs_table(md, "engage_sync"), outcomes_table(md, "engage_sync", keys)
    for table in (runs, outcomes):
        ddl = str(CreateTable(table).compile(dialect=dialect))
        assert "engage_sync" in ddl and "written_at" in ddl, ddl
    sql = add_column_sql(dialect, outcomes, "EVENT_ID", sa.Text())
    assert sql.startswith("ALTER TABLE ") and "EVENT_ID" in sql and "ADD COLUMN" in sql
    assert str(outcomes.delete().where(outcomes.c.run_id == "r").compile(dialect=dialect))


def test_values_for_a_text_key_column_are_written_as_text() -> None:
    row = {"n": 7, "at": AT, "s": "x", "none": None, "other": 8}
    assert as_text(row, frozenset({"n", "at", "s", "none"})) == {
        "n": "7", "at": "2026-01-01T12:00:00", "s": "x", "none": None, "other": 8}
