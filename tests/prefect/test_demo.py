"""`engage-sync demo` says what it shows: the deliberate bad rows (why every first run ends
`partial`), one line per integration and run, the rows rejected with their reasons, the status
records and where to look; the runs' own log lines stay off the console."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from engage_sync.demo.main import BAD_ROWS, free_port
from tests.prefect.conftest import ROOT

CLI = Path(sys.executable).parent / "engage-sync"
NAMES = sorted(p.stem for p in (ROOT / "config" / "demo").glob("*.yaml"))


def test_the_demo_explains_itself_in_a_short_summary(prefect_api: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGAGE_")}
    done = subprocess.run(
        [str(CLI), "demo", "--workdir", str(tmp_path / "demo"), "--port", str(free_port())],
        env={**env, "PREFECT_API_URL": prefect_api}, capture_output=True, text=True,
        timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Traceback" not in out and "nanobind" not in out, out[-3000:]
    assert BAD_ROWS in done.stdout
    first, second = (re.findall(rf"^  (\S+) +{status} +read \d+: synced \d+, rejected \d+",
                                done.stdout, flags=re.M) for status in ("partial", "success"))
    assert sorted(first) == sorted(second) == NAMES, done.stdout  # one line each, each run
    rejected = re.search(r"=== the rows it rejected.*?\n((?:  .*\n)+)", done.stdout)
    assert rejected is not None and "PAYLOAD is not valid JSON" in rejected.group(1)
    assert '"job_status": "partial"' in done.stdout  # the status records
    assert "engage-sync errors NAME --state-url" in done.stdout
    assert f"NAME: any of {', '.join(NAMES)}" in done.stdout
    for internal in ("(counted, ", "prefect.task_runs", "ENGAGE_SYNC_PIN_CPU", "{'job_status'"):
        assert internal not in out, internal
    assert len(out.splitlines()) < 150, out
