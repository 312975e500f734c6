"""No command reaches an address it was not configured with: Prefect's telemetry is off in the
CLI, and in the temporary server it starts when no PREFECT_API_URL is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engage_sync.adapters import telemetry
from tests.integration.conftest import write_integration

CLI = Path(sys.executable).parent / "engage-sync"


def test_turning_telemetry_off_keeps_what_the_user_set() -> None:
    env = {"DO_NOT_TRACK": "0"}
    telemetry.turn_off(env)
    assert env == {"DO_NOT_TRACK": "0", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def test_a_run_with_a_temporary_server_sends_no_telemetry(tmp_path: Path) -> None:
    """Offline, Prefect's server logs 'Failed to send telemetry' when it tries."""
    path = write_integration(tmp_path, "users", {
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{tmp_path / 'wh.duckdb'}"},
        "source": {"query": "SELECT TIMESTAMP '2026-01-01' AS UPDATED_AT, 'u1' AS EXTERNAL_ID, "
                            "'{}' AS PAYLOAD"}})
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_API_URL", *telemetry.OFF)}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    done = subprocess.run([str(CLI), "run", str(path), "--dry-run", "--state-url",
                           f"sqlite:///{tmp_path / 'state.db'}"], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "temporary server" in done.stderr  # the case under test
    assert "PREFECT_API_URL is not set: Prefect starts a temporary server" in done.stderr
    assert "telemetry" not in done.stderr.lower(), done.stderr[-3000:]
