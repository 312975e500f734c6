"""The /users/track kinds: attributes, events and purchases.

They read the service's own sync format (`payload`) or mapped columns (`mapping`), turn rows
into objects with `track_transform`, and pack them with `track_packer`. Attributes are
idempotent and journaled in groups; events and purchases are not idempotent.
"""

from __future__ import annotations

from engage_sync.config.integration import Integration
from engage_sync.kinds.base import Kind
from engage_sync.kinds.track_merge import merge_items
from engage_sync.kinds.track_packer import ENDPOINT, TrackLimits, TrackPacker
from engage_sync.kinds.track_transform import transform_batch
from engage_sync.pack.batching import Packer


def limits(integration: Integration) -> TrackLimits:
    lim = integration.service.limits
    return TrackLimits(objects_per_request=lim.objects_per_request, per_array=lim.per_array,
                       max_body_bytes=lim.max_body_bytes)


def packer(integration: Integration) -> Packer:
    return TrackPacker(limits(integration))


def _identifier_and(integration: Integration, mapped: list[str]) -> list[str]:
    """The identifier columns, then the PAYLOAD column or the mapped columns."""
    cols = list(integration.identifier_columns)
    fmt = integration.payload_format
    if fmt is not None:
        return [*cols, fmt.payload_column]
    return cols + mapped


def attribute_columns(integration: Integration) -> list[str]:
    m = integration.mapping
    mapped = [] if m is None else [*m.attributes, *m.subscription_group_columns]
    return _identifier_and(integration, mapped)


def event_columns(integration: Integration) -> list[str]:
    m = integration.mapping
    e = None if m is None else m.event
    mapped = [] if e is None else (
        [c for c in (e.name_column, e.time, e.app_id) if c] + list(e.properties))
    return _identifier_and(integration, mapped)


def purchase_columns(integration: Integration) -> list[str]:
    m = integration.mapping
    p = None if m is None else m.purchase
    mapped = [] if p is None else (
        [c for c in (p.product_id, p.currency, p.price, p.quantity, p.time, p.app_id) if c]
        + list(p.properties))
    return _identifier_and(integration, mapped)


def _track(_: Integration) -> str:
    return ENDPOINT


def user_column(integration: Integration) -> str:
    """Each row names one user by one identifier kind: its first column (an alias's name)."""
    return integration.identifier_columns[0]


ATTRIBUTES = Kind(name="attributes", rank=40, idempotent=True, columns=attribute_columns,
                  transform=transform_batch, packer=packer, endpoint=_track,
                  group_commits=True, diffable=True, user_column=user_column,
                  merge=merge_items)
EVENTS = Kind(name="events", rank=50, idempotent=False, columns=event_columns,
              transform=transform_batch, packer=packer, endpoint=_track,
              user_column=user_column)
PURCHASES = Kind(name="purchases", rank=60, idempotent=False, columns=purchase_columns,
                 transform=transform_batch, packer=packer, endpoint=_track,
                 user_column=user_column)
