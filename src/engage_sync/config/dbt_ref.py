"""The `dbt` section of an integration file: the dbt model the integration reads.

`dbt: {model: braze_users}` names it; without the section the model is found in the manifest
from `source.table` (`engage_sync.dbt.manifest.Manifest.for_table`). Only the name is checked
here: whether the manifest has it is known when a manifest is read (`engage-sync run
--select`, `--after`, the dbt Cloud webhook), which names this file and key when it has not.
"""

from __future__ import annotations

from pydantic import Field

from engage_sync.config.sections import Frozen


class DbtRef(Frozen):
    model: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,200}$")
    """The model's name in the dbt project (its file name without `.sql`)."""
