"""The fix a snapshot run's warehouse failure names: memory for an out-of-memory error (a
large comparison on DuckDB), else the right to create tables in the snapshot's schema."""

from __future__ import annotations

from engage_sync.run.snapshot_run import warehouse_fix


def test_out_of_memory_names_the_memory_limit_not_the_roles_rights() -> None:
    said = "Out of Memory Error: failed to pin block of size 256.0 KiB (122.0 MiB/122.0 MiB used)"
    assert "memory_limit" in warehouse_fix(said, None)
    assert "create tables" not in warehouse_fix(said, None)


def test_other_failures_name_the_schema_and_the_roles_rights() -> None:
    fix = warehouse_fix("permission denied for schema analytics", "analytics")
    assert "analytics" in fix and "create tables" in fix and "snapshot.schema" in fix
    assert "connection's own schema" in warehouse_fix("permission denied", None)
