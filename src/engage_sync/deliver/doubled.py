"""Rows that may have reached the service twice.

Under `in_doubt: resend` a request whose answer was lost after the service may have processed
it (500, 504, a timeout, a dropped connection) is sent again, and so is a request left in
flight by a kill. For kinds that are not idempotent (events, purchases) each such row may now
be doubled. The rule: every such row is named in the run's errors as kind `duplicate` (it is
also counted as synced, failed or in doubt as its last answer says), and the record counts
them (`rows_possibly_duplicated`). Idempotent kinds are never named: a second copy is harmless.
"""

from __future__ import annotations

from engage_sync.deliver.deliverer import Delivery


def resent_after_doubt(delivery: Delivery) -> bool:
    """Whether the request was sent again after an attempt that may have been processed: some
    doubtful attempt was not the last one (a final in-doubt outcome is the last doubtful
    attempt, never followed by another)."""
    last_doubtful = 1 if delivery.outcome.kind == "in_doubt" else 0
    return delivery.doubtful_attempts - last_doubtful > 0
