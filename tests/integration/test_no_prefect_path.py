"""`engage-sync run FILE --no-prefect` never imports Prefect (about 40 MB and a second of
start-up), and ends cleanly: the status record on stdout, no traceback or DuckDB leak report.
Its process has the collector's young threshold a sync sets from the start (`gc_tuning`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engage_sync.adapters.gc_tuning import GEN0
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, Warehouse, table_integration, user_rows

PROBE = """
import gc, sys
from engage_sync.cli.main import main
code = main(sys.argv[1:])
print(f"GC young={gc.get_threshold()[0]}")
print("PREFECT-IMPORTED" if "prefect" in sys.modules else "PREFECT-NOT-IMPORTED")
sys.exit(code)
"""


def test_a_run_without_prefect_imports_no_prefect(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", user_rows(150))
    warehouse.engine.dispose()  # DuckDB: one process holds the file
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "run", str(path), "--no-prefect",
         "--state-url", f"sqlite:///{tmp_path / 'state.db'}"],
        env={**os.environ, "ENGAGE_API_KEY": sandbox_key}, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.rstrip().endswith(f"GC young={GEN0}\nPREFECT-NOT-IMPORTED")
    record = json.loads(out[:out.rindex("GC ")])
    assert (record["rows_read"], record["rows_synced"]) == (150, 150)
    assert "Traceback" not in done.stderr and "nanobind" not in done.stderr


def test_a_run_raises_the_threshold_before_its_sync(tmp_path: Path) -> None:
    """From its start: a run that fails before any sync (no such integration) has it too."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "run", "missing", "--no-prefect", "--config-dir",
         str(tmp_path), "--state-url", f"sqlite:///{tmp_path / 'state.db'}"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr  # a config error, raised before the sync
    assert done.stdout.splitlines()[0] == f"GC young={GEN0}"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux")
def test_a_run_kept_on_one_cpu_says_so_and_syncs_every_row(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    """ENGAGE_SYNC_PIN_CPU (cpu_affinity): a first diffed run, its field helper started at
    once, on the last CPU the test may use."""
    path = table_integration(warehouse, service, tmp_path, "attributes", user_rows(150))
    warehouse.engine.dispose()
    cpu = max(os.sched_getaffinity(0))
    done = subprocess.run(
        [sys.executable, "-m", "engage_sync.cli.main", "run", str(path), "--no-prefect",
         "--state-url", f"sqlite:///{tmp_path / 'state.db'}"],
        env={**os.environ, "ENGAGE_API_KEY": sandbox_key, "ENGAGE_SYNC_PIN_CPU": str(cpu),
             "ENGAGE_SYNC_FIELD_HELPER_AFTER": "0"},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"the run is kept on CPU {cpu} (ENGAGE_SYNC_PIN_CPU={cpu})" in done.stderr
    record = json.loads(done.stdout)
    assert (record["rows_read"], record["rows_synced"]) == (150, 150)


def test_a_bad_cpu_setting_stops_the_run_before_anything_is_sent(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", user_rows(10))
    warehouse.engine.dispose()
    done = subprocess.run(
        [sys.executable, "-m", "engage_sync.cli.main", "run", str(path), "--no-prefect",
         "--state-url", f"sqlite:///{tmp_path / 'state.db'}"],
        env={**os.environ, "ENGAGE_API_KEY": sandbox_key, "ENGAGE_SYNC_PIN_CPU": "first"},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2  # the CLI's exit status for a config error
    assert done.stderr == ("engage-sync: key ENGAGE_SYNC_PIN_CPU: must be `off`, `auto` or a "
                           "CPU number\n")
    assert service.requests("/users/track") == []
    store = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    try:  # recorded as the integration's run, as every config error is
        run = store.runs_newest_first(path.stem, 0, 1)[0]
    finally:
        store.engine.dispose()
    assert run["job_status"] == "config_error" and "ENGAGE_SYNC_PIN_CPU" in run["message"]
