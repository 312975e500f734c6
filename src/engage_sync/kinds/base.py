"""What a kind is: one object that knows everything the pipeline asks of a kind.

Invariants every kind keeps (checked by its tests):
- `transform` turns each row of a batch into exactly one Item or one Reject, row i with
  seq `first_seq + i`, and reasons that name columns, never values;
- `packer` yields requests within the endpoint's limits, items in the order given, each in
  exactly one request, and never two items touching one user in one request where the service
  promises no order inside a request;
- `endpoint` is a write endpoint with a rate-limit group (`request.group_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from engage_sync.items import Item, TransformResult
from engage_sync.pack.batching import Packer
from engage_sync.pack.request import group_for

if TYPE_CHECKING:
    from engage_sync.config.integration import Integration


@dataclass(frozen=True)
class Kind:
    """One kind of integration.

    rank: its place in a folder's run order (lower first): identities settle before data lands
        on them, and deletes come last so nothing re-creates a deleted user.
    idempotent: sending one of its requests twice has the effect of sending it once. A request
        of a kind that is not idempotent follows the integration's `in_doubt` policy.
    section: the config section it reads (`subscriptions`, `deletes`, …), or None for kinds
        configured by `payload` or `mapping`.
    irreversible: its effect cannot be undone (deletes): a run is capped by `max_deletes`, and a
        dry run lists every object it would send, not a sample.
    group_commits: journal and settle its requests in groups (the high-volume idempotent kind):
        after a crash, a request journaled but unsent is sent again at no cost but billing.
    diffable: its objects are an identifier and attributes the service keeps (attributes), so
        an integration's `diff: fields` sends only the attributes that changed
        (`field_diff`); every other kind is sent as read.
    user_column: the column that names the one user each row touches, so a run may be split
        into partitions by its hash (`partitions`); None where a row may touch two users
        (merges, renames, identify) or must be seen whole (deletes: the cap counts the window).
    merge: a user's items of one run as one item, or why they cannot be (`kinds.track_merge`):
        for formats whose rows each hold some attributes (`merges`).
    """

    name: str
    rank: int
    idempotent: bool
    columns: Callable[[Integration], list[str]]
    transform: Callable[[Integration, pa.RecordBatch, int], TransformResult]
    packer: Callable[[Integration], Packer]
    endpoint: Callable[[Integration], str]
    section: str | None = None
    irreversible: bool = False
    group_commits: bool = False
    diffable: bool = False
    user_column: Callable[[Integration], str | None] | None = None
    merge: Callable[[Integration, Sequence[Item]], Item | str] | None = None

    def rate_group(self, integration: Integration) -> str:
        """The rate-limit group its requests draw from."""
        return group_for(self.endpoint(integration))

    def resends_in_doubt(self, integration: Integration) -> bool:
        """The in-doubt policy (DESIGN rule 5), decided here once: a request whose fate is
        unknown is sent again when the kind is idempotent or the integration says `resend`;
        otherwise (`skip`) it is counted in doubt and not sent again."""
        return self.idempotent or integration.in_doubt == "resend"

    def names_duplicates(self, integration: Integration) -> bool:
        """Whether a request sent again may double rows, so their rows are named as possibly
        duplicated: the in-doubt policy resends, and the kind is not idempotent."""
        return self.resends_in_doubt(integration) and not self.idempotent

    def partition_column(self, integration: Integration) -> str | None:
        """The column whose hash decides a row's partition, or None: not partitionable."""
        return None if self.user_column is None else self.user_column(integration)

    def superseded_by(self, integration: Integration) -> tuple[str, ...]:
        """The columns naming a row's user when a user's rows in one run need one object
        (`superseded_rows: skip`): a diffable kind with mapped columns (every row holds every
        attribute: the last row's object is enough) and no subscription groups (changes, not
        values), or the payload format when the kind can merge (`merges`); else () and every
        row is sent."""
        m = integration.mapping
        if not self.diffable or integration.superseded_rows != "skip" or (
                m.subscription_groups if m is not None else self.merge is None):
            return ()
        return integration.identifier_columns

    def merges(self, integration: Integration) -> bool:
        """Whether a user's rows of one run are merged into one object (`merge`) rather than
        passed for the last one: the payload format, whose rows each hold only some keys."""
        return integration.mapping is None and bool(self.superseded_by(integration))

    def newest_by(self, integration: Integration) -> tuple[str, ...]:
        """The columns naming a row's user where a user's newest row wins (the service keeps
        attribute values, not a history): a retry never sends a row older than one after its
        range. () for kinds whose every row counts (events, purchases, identity kinds)."""
        return integration.identifier_columns if self.diffable else ()

    def diffs(self, integration: Integration) -> bool:
        """Whether runs of this integration send only the attributes that changed."""
        return self.diffable and integration.diff == "fields"
