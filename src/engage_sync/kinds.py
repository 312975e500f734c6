"""The integration kinds beyond /users/track: subscriptions and identity operations.

The pipeline asks this module, for a non-track kind, which columns to read, how to turn a
batch into items and rejects, and how to pack items into requests. Track kinds (attributes,
events, purchases) are handled by `transform` and `batching.TrackPacker`.
"""

from __future__ import annotations

import pyarrow as pa

from engage_sync.batching import Packer
from engage_sync.config import Integration
from engage_sync.model import TransformResult

TRACK_KINDS = ("attributes", "events", "purchases")


def is_track(integration: Integration) -> bool:
    return integration.kind in TRACK_KINDS


def columns(integration: Integration) -> list[str]:
    """Columns a non-track kind reads besides the cursor and key columns."""
    raise NotImplementedError(f"kind {integration.kind}")


def transform(integration: Integration, batch: pa.RecordBatch, first_seq: int
              ) -> TransformResult:
    """Rows of a non-track kind → items and rejects (one of the two per row)."""
    raise NotImplementedError(f"kind {integration.kind}")


def packer(integration: Integration) -> Packer:
    """The packer of a non-track kind."""
    raise NotImplementedError(f"kind {integration.kind}")
