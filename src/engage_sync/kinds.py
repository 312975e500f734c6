"""The integration kinds beyond /users/track: subscriptions and identity operations.

The pipeline asks this module, for a non-track kind, which columns to read, how to turn a
batch into items and rejects, and how to pack items into requests. Track kinds (attributes,
events, purchases) are handled by `transform` and `batching.TrackPacker`; for them this module
only names the extra columns a mapping reads (`track_extra_columns`).

Invariants: every function dispatches on `integration.kind` alone; `transform` returns one
Item or one Reject per row; `packer` yields requests within the endpoint's limits.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from engage_sync import identity_ops, subscriptions
from engage_sync.batching import Packer
from engage_sync.config import TRACK_KINDS, Integration
from engage_sync.model import TransformResult

Transform = Callable[[Integration, pa.RecordBatch, int], TransformResult]

_TRANSFORMS: dict[str, Transform] = {
    "subscriptions": subscriptions.transform,
    "deletes": identity_ops.transform_deletes,
    "identify": identity_ops.transform_identify,
    "merges": identity_ops.transform_merges,
    "alias_renames": identity_ops.transform_alias_renames,
}
_PACKERS: dict[str, Callable[[Integration], Packer]] = {
    "subscriptions": subscriptions.packer,
    "deletes": identity_ops.delete_packer,
    "identify": identity_ops.identify_packer,
    "merges": identity_ops.merge_packer,
    "alias_renames": identity_ops.alias_rename_packer,
}


def is_track(integration: Integration) -> bool:
    return integration.kind in TRACK_KINDS


def _check(integration: Integration) -> str:
    if integration.kind not in _TRANSFORMS:
        raise ValueError(f"kind {integration.kind} is a /users/track kind, not handled here")
    return integration.kind


def columns(integration: Integration) -> list[str]:
    """Columns a non-track kind reads besides the cursor and key columns."""
    _check(integration)
    return list(integration.kind_spec.data_columns())


def transform(integration: Integration, batch: pa.RecordBatch, first_seq: int
              ) -> TransformResult:
    """Rows of a non-track kind → items and rejects (one of the two per row).

    Raises SourceError when a configured column is not in the batch."""
    return _TRANSFORMS[_check(integration)](integration, batch, first_seq)


def packer(integration: Integration) -> Packer:
    """The packer of a non-track kind."""
    return _PACKERS[_check(integration)](integration)


def track_extra_columns(integration: Integration) -> list[str]:
    """Columns a track mapping reads beyond its identifier, attributes, event and purchase:
    the group and state columns of `mapping.subscription_groups`."""
    if integration.mapping is None:
        return []
    return integration.mapping.subscription_group_columns
