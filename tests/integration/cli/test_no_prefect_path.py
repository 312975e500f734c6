"""`engage-sync run FILE --no-prefect` never imports Prefect (about 40 MB and a second of
start-up), and ends cleanly: the status record on stdout, no traceback or DuckDB leak report.
A default run leaves the process's CPU affinity and collector alone; ENGAGE_SYNC_PIN_CPU and
ENGAGE_SYNC_TUNE_GC (opt-in) change them (`cpu_affinity`, `gc_tuning`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters.gc_tuning import GEN0
from engage_sync.state.store import StateStore
from tests.integration.conftest import Service, Warehouse, table_integration, user_rows

PROBE = """
import gc, json, os, sys, threading
calls = []
def spy(module, name):
    real = getattr(module, name)
    def called(*args):
        calls.append([name, [sorted(a) if isinstance(a, (set, frozenset)) else a
                             for a in args]])
        return real(*args)
    setattr(module, name, called)
for name in ("set_threshold", "freeze", "disable"):
    spy(gc, name)
if hasattr(os, "sched_setaffinity"):
    spy(os, "sched_setaffinity")
started = []
start = threading.Thread.start
def started_as(self):
    started.append(self.name)
    return start(self)
threading.Thread.start = started_as
gc.set_threshold(700, 10, 10)
del calls[:]
from engage_sync.cli.main import main
code = main(sys.argv[1:])
print("PROBE " + json.dumps({
    "calls": calls, "threads": started, "threshold": gc.get_threshold(),
    "enabled": gc.isenabled(), "frozen": gc.get_freeze_count(),
    "prefect": "prefect" in sys.modules}))
sys.exit(code)
"""
TUNING = ("ENGAGE_SYNC_PIN_CPU", "ENGAGE_SYNC_TUNE_GC")


def _probed(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str],
                                                           dict[str, Any]]:
    """`engage-sync ARGS` run in a child that reports, at its end, the affinity and collector
    calls it made, the threads it started and the collector's settings."""
    env = {k: v for k, v in {**os.environ, **env}.items() if k not in TUNING or k in env}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True,
                          text=True, timeout=300)
    last = done.stdout.rstrip().rsplit("\n", 1)[-1]
    assert last.startswith("PROBE "), (done.stdout, done.stderr)
    return done, json.loads(last.removeprefix("PROBE "))


def test_a_default_run_leaves_the_cpus_and_the_collector_alone(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    """Neither ENGAGE_SYNC_PIN_CPU nor ENGAGE_SYNC_TUNE_GC set: no affinity set, no watcher,
    no threshold, freeze or disable; and Prefect never imported."""
    path = table_integration(warehouse, service, tmp_path, "attributes", user_rows(150))
    warehouse.engine.dispose()  # DuckDB: one process holds the file
    done, seen = _probed(["run", str(path), "--no-prefect",
                          "--state-url", f"sqlite:///{tmp_path / 'state.db'}"],
                         {"ENGAGE_API_KEY": sandbox_key})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    record = json.loads(out[:out.rindex("PROBE ")])
    assert (record["rows_read"], record["rows_synced"]) == (150, 150)
    assert seen["calls"] == []
    assert "engage-sync-cpu-watch" not in seen["threads"]
    assert (seen["threshold"], seen["enabled"], seen["frozen"]) == ([700, 10, 10], True, 0)
    assert seen["prefect"] is False
    assert "Traceback" not in done.stderr and "nanobind" not in done.stderr
    assert "ENGAGE_SYNC_PIN_CPU" not in done.stderr


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux")
def test_the_opt_in_settings_pin_the_run_and_tune_the_collector(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", user_rows(150))
    warehouse.engine.dispose()
    cpu = max(os.sched_getaffinity(0))
    done, seen = _probed(["run", str(path), "--no-prefect",
                          "--state-url", f"sqlite:///{tmp_path / 'state.db'}"],
                         {"ENGAGE_API_KEY": sandbox_key, "ENGAGE_SYNC_PIN_CPU": str(cpu),
                          "ENGAGE_SYNC_TUNE_GC": "on"})
    assert done.returncode == 0, done.stderr
    assert ["sched_setaffinity", [0, [cpu]]] in seen["calls"]
    assert ["freeze", []] in seen["calls"]
    assert seen["threshold"] == [GEN0, 10, 10] and seen["frozen"] > 0


def test_a_tuned_run_raises_the_threshold_before_its_sync(tmp_path: Path) -> None:
    """From its start: a run that fails before any sync (no such integration) has it too."""
    done, seen = _probed(["run", "missing", "--no-prefect", "--config-dir", str(tmp_path),
                          "--state-url", f"sqlite:///{tmp_path / 'state.db'}"],
                         {"ENGAGE_SYNC_TUNE_GC": "on"})
    assert done.returncode == 2, done.stderr  # a config error, raised before the sync
    assert seen["threshold"] == [GEN0, 10, 10] and seen["frozen"] == 0


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
