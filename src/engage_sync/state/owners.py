"""Who owns a run: owner tokens, and whether the process a token names is still running.

This module is the one owner of how a token is written: `host:pid` for a process
(`owner_token`), `host:pid:<8 hex>` for one attempt of a run (`new_owner`, which the lease
takes). Only owners on this host can be checked; any other owner counts as gone here, and the
lease (`run/lease.py`) decides for them.
"""

from __future__ import annotations

import os
import re
import socket
import uuid


def owner_token() -> str:
    """This process: `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def new_owner() -> str:
    """An owner token unique to one attempt of one run: `host:pid:<8 hex>`."""
    return f"{owner_token()}:{uuid.uuid4().hex[:8]}"


_OWNER = re.compile(r"^(?P<host>[^:]*):(?P<pid>\d+)(?::[0-9a-f]+)?$")


def _local_pid(owner: str | None) -> int | None:
    """The pid of an owner token ("host:pid" or "host:pid:attempt") of this host, else None."""
    match = _OWNER.match(owner or "")
    if match is None or match["host"] != socket.gethostname():
        return None
    return int(match["pid"])


def owner_alive(owner: str | None) -> bool:
    """Whether the process that owns a run is alive on this host (another process than this).
    Owners on other hosts cannot be checked from here and count as gone (runs from before
    leases only: `lease.py` decides for the others)."""
    pid = _local_pid(owner)
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_gone_here(owner: str | None) -> bool:
    """Whether the owner is surely not running: a process of this host that is dead, or an
    earlier attempt of this very process. A lease need not run out for such an owner."""
    return _local_pid(owner) is not None and not owner_alive(owner)
