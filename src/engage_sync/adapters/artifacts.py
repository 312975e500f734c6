"""What a flow run leaves in Prefect beside its state: the run's status record and its row
errors as table artifacts, then old row errors pruned.

Invariants: an artifact holds keys and reasons, never a payload value; the errors table holds
at most ARTIFACT_ROWS rows and says how many there were (`engage-sync errors` lists them all);
pruning never fails a sync, and a folder's runs prune once, when the last of them ended (each
pruning is a scan of the state's error records).
"""

from __future__ import annotations

from typing import Any

from prefect.artifacts import create_table_artifact

from engage_sync.state.retention import prune_quietly
from engage_sync.state.store import StateStore
from engage_sync.status.record import run_errors

ARTIFACT_ROWS = 1000


def leave_artifacts(name: str, record: dict[str, Any], store: StateStore,
                    prune: bool = True) -> None:
    """The record and its errors as the flow run's artifacts, then (if `prune`) old row
    errors pruned."""
    key = "".join(c if c.isalnum() else "-" for c in name.lower())
    create_table_artifact(table=[record], key=f"sync-status-{key}",  # type: ignore[call-arg]
                          description=f"engage-sync status record of {name}", _sync=True)
    errors = run_errors(store, record["run_id"], limit=ARTIFACT_ROWS) if "run_id" in record else []
    if errors:
        more = sum(record.get(k, 0) for k in (
            "rows_failed_with_errors", "rows_in_doubt", "errors_unmapped",
            "rows_possibly_duplicated"))  # every kind of error the listing holds
        note = f" (first {ARTIFACT_ROWS} of {more})" if more > len(errors) else ""
        create_table_artifact(  # type: ignore[call-arg]
            table=errors, key=f"sync-rejects-{key}", _sync=True,
            description=f"rejected, failed, in-doubt and possibly doubled rows of {name}, and "
                        f"service errors naming no row: keys and reasons{note}; "
                        f"`engage-sync errors {name}` lists them")
    if prune:
        prune_quietly(store)
