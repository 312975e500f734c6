"""A dbt exposure for an integration: the dbt docs then show which models feed the service.

Invariants: one exposure per integration, named `engage_sync_<integration>` (dbt's names are
letters, digits and underscores: other characters become `_`), of type `application`,
depending on the one model the integration reads by `ref()`; the same input gives the same
YAML, so regenerating the files changes nothing that did not change.
"""

from __future__ import annotations

import re
from typing import Any

OWNER = "engage-sync"


def exposure_name(integration: str) -> str:
    return "engage_sync_" + re.sub(r"[^A-Za-z0-9_]", "_", integration)


def exposure(integration: str, kind: str, model: str, file: str) -> dict[str, Any]:
    """The exposures file (`version: 2`) of one integration reading `model`."""
    return {"version": 2, "exposures": [{
        "name": exposure_name(integration),
        "label": f"engage-sync: {integration}",
        "type": "application",
        "owner": {"name": OWNER},
        "description": (f"Synced to the customer-engagement service by engage-sync "
                        f"({kind}, integration file {file})."),
        "depends_on": [f"ref('{model}')"],
        "meta": {"engage_sync": {"integration": integration, "kind": kind}},
    }]}
