"""SIGTERM's handler in a real process: a run that does not stop within its grace is ended by
the watchdog with one line; with no run watching, SIGTERM ends the process at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

# Stands for a run stuck where no check reaches (a long warehouse query): it never stops.
STUCK = """
import os, sys, time
from engage_sync.adapters.stop_signal import stop_on_sigterm
with stop_on_sigterm() as stop:
    if sys.argv[1] == "armed":
        stop.arm(0.5)
    print("ready", flush=True)
    time.sleep(30)
"""


def _signalled(mode: str) -> tuple[int, str, float]:
    proc = subprocess.Popen([sys.executable, "-c", STUCK, mode], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    try:
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()  # the process has ended, unless the test fails
    return proc.returncode, err.decode(), time.monotonic() - signalled


@pytest.mark.parametrize(("mode", "code"), [("armed", 143), ("not armed", -signal.SIGTERM)])
def test_sigterm_ends_the_process_within_its_grace(mode: str, code: int) -> None:
    returncode, err, seconds = _signalled(mode)
    assert returncode == code, err
    assert seconds < 5  # not the 30 s sleep
    if mode == "armed":
        assert err == ("engage-sync: not stopped 0.5 s after SIGTERM: ending now; the next "
                       "run resumes (what was in flight is in doubt)\n")
