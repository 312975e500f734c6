"""Owner tokens (lease.py): a dead owner of this host is recognised whatever its attempt part
looks like (an all-digit hex part once made the parser take it for the pid)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from engage_sync.state.owners import owner_alive, owner_gone_here


def test_a_dead_local_owner_is_gone_whatever_its_attempt_part() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    host = socket.gethostname()
    for token in (f"{host}:{child.pid}", f"{host}:{child.pid}:41870107",
                  f"{host}:{child.pid}:abcdef12"):
        assert owner_gone_here(token) and not owner_alive(token), token


def test_a_live_local_owner_and_a_remote_one_are_not_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert owner_alive(f"{socket.gethostname()}:{child.pid}:41870107")
        assert not owner_gone_here(f"{socket.gethostname()}:{child.pid}:41870107")
    finally:
        child.kill()
        child.wait()
    assert not owner_gone_here(f"other-host:{os.getpid()}:41870107")
