"""The README's sandbox commands, as written (ports moved to free ones): each starts, answers
on loopback and stops. `faults.yaml` is the README's own fault-rule example."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engage_sync.demo.main import free_port

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## The sandbox: the service on your machine"


def section() -> str:
    return (ROOT / "README.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]


def commands() -> list[str]:
    block = re.findall(r"```bash\n(.*?)```", section(), flags=re.S)[0]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line]


def answers(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            time.sleep(0.2)
    return False


@pytest.mark.parametrize("command", commands())
def test_a_readme_sandbox_command_starts_and_answers(command: str, tmp_path: Path) -> None:
    faults = re.findall(r"```yaml\n(.*?)```", section(), flags=re.S)[0]
    (tmp_path / "faults.yaml").write_text(faults)
    (tmp_path / "config").symlink_to(ROOT / "config")
    port = str(free_port())
    argv = command.replace("8787", port).split()
    assert argv[0] == "engage-sandbox"
    proc = subprocess.Popen([str(Path(sys.executable).parent / argv[0]), *argv[1:]],
                            cwd=tmp_path, env=dict(os.environ), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        assert answers(f"http://127.0.0.1:{port}/_sandbox/counters", proc), (
            proc.stdout.read().decode() if proc.stdout and proc.poll() is not None else "")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
