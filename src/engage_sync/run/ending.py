"""How a run's row ends: finished with its tally, stopped resumable, or left to the next run
when the state database was lost; and its failed requests kept for later runs.

Invariants:
- a finished run's status and message are decided from its settled counts alone
  (`status.record`);
- a stopped run stays `running`, its lease released with the one line that says so, so that
  the next start resumes it at once on any host;
- the failed requests (in doubt too, under `resend`) are kept as retries with one more try
  than the run's rows had, parked once the integration's `failed_row_tries` is reached.
"""

from __future__ import annotations

import logging
from contextlib import suppress

from engage_sync.cursor.window import Window
from engage_sync.errors import RunStopped, StateUnavailable
from engage_sync.read.plan import RunPlan
from engage_sync.state.retries import PARKED, WindowBounds
from engage_sync.state.store import StateStore
from engage_sync.status.record import job_message, job_status

log = logging.getLogger("engage_sync.run.loop")


def finish(state: StateStore, run_id: str, name: str) -> None:
    """Finish the run with the status and message of its settled counts."""
    counts = state.counts(run_id)
    tally = (counts.synced, counts.failed, counts.rejected, counts.in_doubt,
             int(state.run(run_id).get("rows_unchanged") or 0))
    state.finish_run(run_id, job_status(*tally), message=job_message(name, *tally),
                     counts=counts)


def stopped(state: StateStore, run_id: str, owner: str, name: str, exc: RunStopped
            ) -> RunStopped:
    """Release the stopped run's lease with the one line that says it is resumable."""
    run = state.run(run_id)
    message = (f"integration {name}: {exc}: requests in flight were settled, no "
               f"more were sent ({run['requests_sent']} in all); run {run['seq']} is "
               "resumable and the next run of the integration resumes it")
    state.release_lease(run_id, owner, message=message)
    return RunStopped(message)


def release_if_back(state: StateStore, run_id: str, owner: str, name: str,
                    exc: StateUnavailable) -> None:
    """The state database was lost: if it answers again (a restart), release the lease with
    the line, so the next run resumes at once on any host; else the lease runs out."""
    with suppress(StateUnavailable):
        state.release_lease(run_id, owner, message=f"integration {name}: {exc}")


def keep_failed(state: StateStore, plan: RunPlan, run_id: str, window: Window,
                tries: int) -> None:
    """Keep the run's failed requests for later runs to send again first
    (`run/retries.py`), with `tries` tries."""
    i = plan.integration
    kept, kept_as = state.record_retries(
        run_id, i.name, WindowBounds(window.floor, window.before, window.partition),
        plan.resend_in_doubt, tries, i.failed_row_tries)
    if kept:
        log.warning("integration %s: the rows of %d failed requests %s", i.name, kept,
                    f"are parked after {tries} tries (engage-sync errors {i.name} "
                    "names them)" if kept_as == PARKED else
                    "will be sent again first by the next run")
