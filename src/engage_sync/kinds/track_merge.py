"""One user's attribute objects of one run merged into one object: the payload format, whose
rows each hold some of a user's attributes. Pure.

Invariants:
- the merge holds every key any of the objects holds, each with the value of the last object
  (in the order given: the read's) that holds it; the identifier and the update flag are the
  same in every object of one user, so they stay as they are;
- the merged item keeps the first item's seq, key and user: it is that row's outcome, and the
  other rows are passed (the reader marks them UNCHANGED);
- its points are those of the merged object (its keys but the identifier and the flag);
- a merge the service would refuse (more attributes than a row may hold, or an object too
  large for a request) is not made: the reason comes back instead, and the rows are sent as
  they are, each in its own object, in order (the last value of each key still wins).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from engage_sync import validate as v
from engage_sync.config.integration import Integration
from engage_sync.items import Item
from engage_sync.kinds.track_rows import Sink


def merge_items(integration: Integration, items: Sequence[Item]) -> Item | str:
    """The objects of `items` (one user's, in the read's order) as one item of the first's row,
    or why they cannot be one object."""
    first = items[0]
    obj = orjson.loads(first.blob)
    for item in items[1:]:
        obj.update(orjson.loads(item.blob))
    attributes = len(obj) - (2 if "_update_existing_only" in obj else 1)
    problem = v.check_attribute_count(attributes)
    if problem is not None:
        return problem
    sink = Sink(first.seq, [first.key], first.array, integration.service.limits.max_body_bytes)
    sink.item(0, first.user, obj)
    result = sink.result()
    if result.rejects:
        return result.rejects[0].reason
    return result.items[0]
