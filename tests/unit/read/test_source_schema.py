"""The schema guard's comparison (pure): what stops a run, what is only reported."""

from __future__ import annotations

from engage_sync.read.source_schema import compare, kept

OLD = {"UPDATED_AT": "TIMESTAMP", "USER_ID": "VARCHAR", "PLAN": "VARCHAR(10)", "N": "INTEGER",
       "NOTE": "TEXT", "payload.age": "number", "payload.tags": "array|string"}


def test_a_read_column_whose_type_changed_is_retyped() -> None:
    changes = compare(OLD, {**OLD, "N": "VARCHAR"}, ["UPDATED_AT", "USER_ID", "N"])
    assert changes.retyped == [("N", "INTEGER", "VARCHAR")]


def test_a_column_not_read_is_never_retyped_and_names_match_in_any_case() -> None:
    assert not compare(OLD, {**OLD, "NOTE": "INTEGER"}, ["n"]).retyped
    assert compare(OLD, {**OLD, "N": "BIGINT"}, ["n"]).retyped == [("N", "INTEGER", "BIGINT")]


def test_a_longer_character_type_is_no_change() -> None:
    assert not compare(OLD, {**OLD, "PLAN": "VARCHAR(40)"}, ["PLAN"])
    assert compare(OLD, {**OLD, "PLAN": "INTEGER"}, ["PLAN"]).retyped


def test_payload_keys_are_retyped_only_when_no_type_is_shared() -> None:
    assert not compare(OLD, {**OLD, "payload.tags": "array"}, []).retyped
    assert compare(OLD, {**OLD, "payload.age": "string"}, []).retyped == [
        ("payload.age", "number", "string")]


def test_added_and_removed_names_are_reported_not_retyped() -> None:
    new = {k: v for k, v in OLD.items() if k != "NOTE"} | {"TIER": "VARCHAR"}
    changes = compare(OLD, new, list(OLD))
    assert (changes.retyped, changes.removed, changes.added) == ([], ["NOTE"], ["TIER"])


def test_what_is_kept_unions_payload_types_and_remembers_missing_guarded_columns() -> None:
    now = {"UPDATED_AT": "TIMESTAMP", "USER_ID": "VARCHAR", "payload.age": "string"}
    record = kept(OLD, now, ["N", "UPDATED_AT"])
    assert record["payload.age"] == "number|string"  # both seen: neither flips a run later
    assert record["payload.tags"] == "array|string"  # not in this sample: kept as it was
    assert record["N"] == "INTEGER"  # a guarded column gone: its return retyped is a change
    assert "NOTE" not in record and "PLAN" not in record  # not guarded: gone is gone
    assert compare(record, {**record, "N": "VARCHAR"}, ["N"]).retyped
