"""The CLI's output to a reader that stops early (`engage-sync status ... | head`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = Path(sys.executable).parent / "engage-sync"


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    state = f"sqlite:///{tmp_path / 'state.db'}"
    proc = subprocess.Popen([str(CLI), "status", "10_users", "--state-url", state],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, stderr
    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr, stderr
