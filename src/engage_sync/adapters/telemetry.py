"""No telemetry: engage-sync's processes reach only the addresses they are configured with.

Prefect sends usage telemetry from its server (`PREFECT_SERVER_ANALYTICS_ENABLED`) and from
clients (`DO_NOT_TRACK`); offline, the server logs `Failed to send telemetry` on every start.
`turn_off()` sets both in this process's environment, which the servers Prefect starts for it
inherit (the temporary server of `engage-sync run` without PREFECT_API_URL, the demo's, the
served deployments' runs). A value the user set is kept.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

OFF = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}


def turn_off(environ: MutableMapping[str, str] | None = None) -> None:
    """Turn Prefect's telemetry off in `environ` (default os.environ), keeping set values."""
    environ = os.environ if environ is None else environ
    for key, value in OFF.items():
        environ.setdefault(key, value)
