"""`engage-sync run` without PREFECT_API_URL: the first run starts a Prefect server in the
background and says so; later runs find it and pay no server start (`cli/local_server.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from engage_sync.cli.local_server import ENV, MARKER, healthy
from tests.integration.conftest import write_integration

BIN = Path(sys.executable).parent


def test_the_first_run_leaves_a_server_that_later_runs_use(tmp_path: Path) -> None:
    path = write_integration(tmp_path, "users", {
        "kind": "attributes", "warehouse": {"url": f"duckdb:///{tmp_path / 'wh.duckdb'}"},
        "source": {"query": "SELECT TIMESTAMP '2026-01-01' AS UPDATED_AT, 'u1' AS EXTERNAL_ID, "
                            "'{}' AS PAYLOAD"}})
    home = tmp_path / "prefect-home"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", ENV)}
    env["PREFECT_HOME"] = str(home)
    run = [str(BIN / "engage-sync"), "run", str(path), "--dry-run", "--state-url",
           f"sqlite:///{tmp_path / 'state.db'}"]
    try:
        first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=240)
        assert first.returncode == 0, first.stderr[-3000:]
        assert "started a Prefect server in the background at http://127.0.0.1:" in first.stderr
        url = (home / MARKER).read_text().split('"url": "')[1].split('"')[0]
        assert healthy(url)
        started = time.monotonic()
        second = subprocess.run(run, env=env, capture_output=True, text=True, timeout=240)
        took = time.monotonic() - started
        assert second.returncode == 0, second.stderr[-3000:]
        assert "in the background" not in second.stderr, second.stderr[-3000:]
        assert "temporary server" not in second.stderr
        print(f"a later run on the background server took {took:.1f} s")
    finally:
        subprocess.run([str(BIN / "prefect"), "server", "stop"], env=env,
                       capture_output=True, timeout=60)
