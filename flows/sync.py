"""Entry points for Prefect deployments: `flows/sync.py:sync_integration` and `:sync_folder`.

The flows live in the package (`engage_sync.adapters.flows`) so that the CLI and deployments run the
same code; this file only makes them addressable by path.
"""

from engage_sync.adapters.flows import sync_folder, sync_integration

__all__ = ["sync_folder", "sync_integration"]
