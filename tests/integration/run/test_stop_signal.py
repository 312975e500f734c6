"""SIGTERM's handler in a real process: a run that does not stop within its grace is ended by
the watchdog with one line; with no run watching, SIGTERM ends the process at once."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

# Stands for a run stuck where no check reaches (a long warehouse query): it never stops.
STUCK = """
import os, sys, time
from engage_sync.adapters.stop_signal import stop_on_sigterm
with stop_on_sigterm() as stop:
    if sys.argv[1] == "armed":
        stop.arm(0.5)
    print("ready", flush=True)
    time.sleep(600)
"""
ENDS = 120  # seconds a process must end in after SIGTERM: generous, and far below the sleep


def _signals(pid: int) -> str:
    """The child's signal masks (blocked, ignored, caught, pending), for a failure's message."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return " ".join(x for x in lines if x.startswith(("SigBlk", "SigIgn", "SigCgt", "SigPnd",
                                                      "ShdPnd", "Threads")))


def _signalled(mode: str, tmp_path: Path) -> tuple[int, str]:
    """Exit code and stderr of a process ended by SIGTERM within ENDS seconds (its 600 s sleep
    cut short). The end is the process's, not its pipes' (a process forked meanwhile by another
    thread could hold a pipe open): stderr goes to a file."""
    with (tmp_path / "stderr").open("w+b") as err:
        proc = subprocess.Popen([sys.executable, "-c", STUCK, mode], stdout=subprocess.PIPE,
                                stderr=err)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=ENDS)
            except subprocess.TimeoutExpired:
                pytest.fail(f"alive {ENDS} s after SIGTERM: {_signals(proc.pid)}")
        finally:
            proc.kill()  # the process has ended, unless the test fails
            proc.stdout.close()
        err.seek(0)
        return proc.returncode, err.read().decode()


@pytest.mark.parametrize(("mode", "code"), [("armed", 143), ("not armed", -signal.SIGTERM)])
def test_sigterm_ends_the_process_within_its_grace(mode: str, code: int, tmp_path: Path
                                                   ) -> None:
    returncode, err = _signalled(mode, tmp_path)
    assert returncode == code, err  # ended by the signal (143: the watchdog), not the sleep
    if mode == "armed":
        assert err == ("engage-sync: not stopped 0.5 s after SIGTERM: ending now; the next "
                       "run resumes (what was in flight is in doubt)\n")
