"""One HTTP request to the service, as built by the batching stage and sent by `deliver`.

Invariants:
- `body` is the exact JSON sent; `items[k]` sits in the body's array `positions[k][0]` at index
  `positions[k][1]`, so a service error `{input_array, index}` maps back to one item;
- positions are unique; `items` and `positions` have the same length;
- the repr never shows the body or item contents (they hold payload values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from engage_sync.items import Item

USERS_TRACK = "users_track"
SUBSCRIPTION = "subscription"
IDENTITY = "identity"
SYNC_STATUS = "sync_status"

#: Rate-limit group of each write endpoint: endpoints of one group share one budget.
ENDPOINT_GROUPS: dict[str, str] = {
    "/users/track": USERS_TRACK,
    "/subscription/status/set": SUBSCRIPTION,
    "/v2/subscription/status/set": SUBSCRIPTION,
    "/users/delete": IDENTITY,
    "/users/identify": IDENTITY,
    "/users/merge": IDENTITY,
    "/users/alias/update": IDENTITY,
    "/users/alias/new": IDENTITY,
}


def group_for(endpoint: str) -> str:
    """The rate-limit group of an endpoint path; raises KeyError for an unknown path."""
    try:
        return ENDPOINT_GROUPS[endpoint]
    except KeyError:
        if endpoint.startswith("/cdi/integrations/"):
            return SYNC_STATUS
        raise KeyError(f"no rate-limit group is known for the endpoint {endpoint}") from None


@dataclass(frozen=True, eq=False)
class Request:
    """A ready-to-send request and the items it carries.

    `bulk` sends the header `X-Braze-Bulk: true` (backfill traffic). `resend_in_doubt` is True
    when sending the request twice is acceptable: every item is idempotent (attributes) or the
    integration's in_doubt policy is `resend`. Raises ValueError when positions and items
    disagree.
    """

    endpoint: str
    group: str
    body: bytes = field(repr=False)
    items: tuple[Item, ...] = field(repr=False)
    positions: tuple[tuple[str, int], ...] = field(repr=False)
    bulk: bool = False
    resend_in_doubt: bool = True

    def __post_init__(self) -> None:
        if len(self.items) != len(self.positions):
            raise ValueError(
                f"{len(self.items)} items but {len(self.positions)} positions for {self.endpoint}"
            )
        if len(set(self.positions)) != len(self.positions):
            raise ValueError(f"two items share one (input_array, index) for {self.endpoint}")

    def __repr__(self) -> str:
        return (
            f"Request(endpoint={self.endpoint!r}, group={self.group!r}, items={len(self.items)}, "
            f"bytes={len(self.body)}, bulk={self.bulk}, resend_in_doubt={self.resend_in_doubt})"
        )

    @cached_property
    def _index(self) -> dict[tuple[str, int], int]:
        # Built only when the service reports item errors: the common path never pays for it.
        return {pos: k for k, pos in enumerate(self.positions)}

    def item_at(self, input_array: str, index: int) -> int | None:
        """The position in `items` of the object at `input_array[index]` of the body, if any."""
        return self._index.get((input_array, index))
