"""The README's commands, run as written: the "Commands" block after the demo, and every bash
block of "Running it in production", in order, in one shell each, in a scratch directory
holding the repository's `config/`, `deployments/` and `.venv` (the install line is skipped:
this venv is the install).

Only the fixed ports change (4200, 8787, 8788 → free loopback ports, with ENGAGE_BASE_URL
pointing the demo integrations at the moved sandbox), and the serving schedules' crons, moved
12 hours away: a tick mid-test starts eight runs beside the walkthrough's own, which then may
find its integration busy (a 429 from the status server fails `curl -f`, by design; the waits
and refusals a tick brings are tested on their own: `test_duckdb_turns`,
`test_run_in_progress`). PREFECT_HOME is a scratch folder; background processes are stopped
with the shell's process group."""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engage_sync.demo.main import free_port
from tests.prefect.conftest import ROOT, _stop

INSTALL = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'"
SERVED_CRONS = ('"*/15 * * * *"', '"0 3 * * sun"')  # incremental, full resync


def blocks(readme: str, heading: str) -> str:
    """The bash blocks of one README section (up to the next `## ` heading), joined, without
    the install line."""
    section = readme.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    script = "\n".join(re.findall(r"```bash\n(.*?)```", section, flags=re.S))
    assert script.strip(), heading
    return script.replace(INSTALL, "")


def failure(output: str) -> str:
    """The output to show when the script failed: its lines other than DuckDB's exit noise,
    from its first traceback when it has one (else its end)."""
    text = "\n".join(line for line in output.splitlines() if not line.startswith(" - leaked"))
    first = text.find("Traceback")
    return text[max(0, first - 2000):first + 6000] if first >= 0 else text[-8000:]


def run_script(script: str, tmp_path: Path, ports: dict[str, str],
               **env_vars: str) -> tuple[int, str]:
    """Run `script` with bash -e in a scratch checkout; its exit code and output."""
    for fixed, free in ports.items():
        script = script.replace(fixed, free)
    work = scratch(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "ENGAGE_", "VIRTUAL_ENV"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"),
               ENGAGE_BASE_URL=f"http://127.0.0.1:{ports['8787']}", **env_vars)
    log = tmp_path / "script.log"
    with log.open("w") as out:
        shell = subprocess.Popen(["bash", "-e", "-c", script], cwd=work, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
        try:
            code = shell.wait(timeout=600)
        finally:
            _stop(shell)
            # `engage-sync run` may have left a Prefect server in the background (local_server)
            subprocess.run([str(ROOT / ".venv" / "bin" / "prefect"), "server", "stop"], env=env,
                           capture_output=True, timeout=60)
    return code, log.read_text()


def scratch(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in (".venv", "config", "deployments", "flows"):
        (work / name).symlink_to(ROOT / name)
    return work


@pytest.mark.slow
def test_the_production_walkthrough_runs_as_written(tmp_path: Path) -> None:
    ports = {"4200": str(free_port()), "8787": str(free_port()), "8788": str(free_port())}
    script = blocks((ROOT / "README.md").read_text(), "## Running it in production")
    assert INSTALL not in script and "until curl -fs" in script  # waits for the server
    later = datetime.now(UTC) + timedelta(hours=12)  # serve.py's crons are in UTC by default
    for cron in SERVED_CRONS:
        assert cron in script
        script = script.replace(cron, f'"{later.minute} {later.hour} * * *"')
    code, output = run_script(script, tmp_path, ports)
    assert code == 0, failure(output)
    assert "Traceback" not in output, failure(output)
    assert "nanobind" not in output, failure(output)
    # step 4: the run triggered with parameters, then its record in `engage-sync status`
    assert "Flow run '10_users-full_resync' - Finished in state Completed()" in output
    assert '"mode": "full_resync"' in output
    # the backfill found the served deployment's file (config/demo, not config/) and ran
    # one flow run per chunk
    assert "chunk 2/2" in output
    assert output.count("Flow run '10_users-backfill' - Finished in state Completed()") == 2
    assert '"message":"success"}' in output  # the status endpoint, through curl
    assert re.search(r"pruned \d+ rejected/failed row records", output)


@pytest.mark.slow
def test_the_commands_block_runs_as_written_after_the_demo(prefect_api: str,
                                                           tmp_path: Path) -> None:
    ports = {"8787": str(free_port())}
    script = blocks((ROOT / "README.md").read_text(), "## Commands")
    code, output = run_script(
        f"source .venv/bin/activate\nengage-sync demo --workdir demo-output\n{script}",
        tmp_path, ports, PREFECT_API_URL=prefect_api)
    assert code == 0, failure(output)
    assert "Traceback" not in output, failure(output)
    assert "nanobind" not in output, failure(output)
    assert "Beginning flow run '10_users-incremental'" in output  # exit 0: it completed
    assert '"dry_run": true' in output  # 20_events --dry-run
    assert "backfill 10_users: [2026-01-01" in output
    assert re.search(r"pruned \d+ rejected/failed row records", output)
