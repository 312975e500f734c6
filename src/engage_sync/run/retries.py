"""Failed rows sent again by later runs, whatever their cursor: the retry pass.

A request that failed (a 5xx storm past the retry deadline, a 401 between a key's rotation
and its deployment) or was left in doubt under `resend` leaves a retry (`state/retries.py`):
its range of the source order. Before its own window, an incremental or full-resync run sends
each pending retry's rows again, as one run of mode `retry` over that range (`RetryScope`).

Invariants:
- a retry run reads the range as the source holds it now, and only the request's own rows
  where the journal kept their keys (events, purchases: never a row the original run dropped
  as sent before); a row whose `UPDATED_AT` moved on is not there (the window reads it); an
  attribute row whose user has a newer row after the range is passed (`Drops.newer`: the newer
  row landed, or will), so a retry never writes older values over newer ones;
- the pass waits while another process runs the integration (its lease), and a retry whose
  run finished before the retry was closed is closed from that run, never sent again;
- it goes through the same loop: journal before send, the field diff (an attribute is billed
  once, when it lands), rejects recorded, the in-doubt policy; it never moves the cursor;
- what fails again becomes newer retries with one more try (`Run.execute`), parked once
  `failed_row_tries` is reached; the retry it came from is closed as `retried`, or `landed`
  when nothing of it failed again;
- a retry run that stops on an error stops the pass: the rest stay pending for the next run,
  and the run's own window still goes (it finds the error for itself); an error that is not
  the run's failure (`errors.NOT_THE_RUNS_FAILURE`: a lost lease, a stop, the state database
  lost) ends the command as it ends a run.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from engage_sync.config.run_options import RunOptions
from engage_sync.cursor.progress import Cursor
from engage_sync.cursor.window import Window
from engage_sync.errors import NOT_THE_RUNS_FAILURE, SyncError
from engage_sync.read.plan import RunPlan
from engage_sync.run.loop import Deps, Run
from engage_sync.run.windows import Windows
from engage_sync.state.retries import LANDED, RETRIED, Retry
from engage_sync.state.store import StateStore

log = logging.getLogger(__name__)


class RetryScope:
    """The rows of one failed request (its range), sent again by a later run."""

    moves_cursor = False
    counts_null_cursors = False  # the runs that read windows count them
    own_process = False  # a few rows: no helper process
    resumes_after_error = True  # the retry stays pending; the next pass resumes its run
    siblings: str | None = None

    def __init__(self, retry: Retry) -> None:
        self.retry = retry
        self.tries = retry.tries
        self.only_keys = retry.keys

    def run_name(self, integration: str) -> str:
        return integration

    def resume_key(self, options: RunOptions) -> str | None:
        return self.retry.scope

    def finished(self, state: StateStore, run_name: str) -> dict[str, Any] | None:
        """A run of this retry that finished before its retry was closed (the process stopped
        in between): its record, so the rows are not sent again."""
        run_id = state.finished_retry_run(run_name, self.retry)
        return None if run_id is None else state.run(run_id)

    def new_window(self, windows: Windows, state: StateStore, stored: Cursor | None,
                   now: datetime) -> Window:
        r = self.retry
        return Window(start=r.start, signpost=r.end[0], floor=r.floor, before=r.before,
                      partition=r.partition, until=r.end)

    def narrow(self, window: Window) -> Window:
        """The range again, also for a resumed run (whose window is rebuilt from its row)."""
        r = self.retry
        return replace(window, floor=r.floor, before=r.before, partition=r.partition,
                       until=r.end)

    def failed(self, state: StateStore, run_id: str, owner: str, integration: str,
               error: SyncError) -> None:
        state.drop_pending(run_id, integration)  # never sent (the send loop settled the rest)
        state.release_lease(run_id, owner, message=str(error))


def retry_failed_rows(plan: RunPlan, deps: Deps) -> list[dict[str, Any]]:
    """Send the integration's pending retries again, oldest first; their status records."""
    integration, plan = plan.integration, plan.with_options(RunOptions(mode="retry"))
    pending = deps.state.pending_retries(integration.name)
    if pending and deps.state.has_live_run(integration.name):
        log.warning("integration %s: another process is running it; the rows of %d failed "
                    "requests wait for a later run", integration.name, len(pending))
        return []
    if pending:
        log.info("integration %s: sending again the rows of %d failed requests first",
                 integration.name, len(pending))
    records: list[dict[str, Any]] = []
    for retry in pending:
        try:
            record = Run(plan, deps, RetryScope(retry)).execute()
        except NOT_THE_RUNS_FAILURE:  # the state database lost too: the main run would not go
            raise
        except SyncError as exc:
            log.warning("integration %s: sending failed rows again stopped: %s; %d retries "
                        "stay pending", integration.name, exc, len(pending) - len(records))
            break
        again = deps.state.retry_states([record["run_id"]])  # kept by the retry run itself
        deps.state.close_retry(retry, RETRIED if again else LANDED)
        records.append(record)
    return records
