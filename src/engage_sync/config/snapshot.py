"""The settings of an integration without a cursor (`changes: snapshot`): where its snapshot is
kept, what happens to users who leave the model (`on_leave`), and the cap on them
(`max_leaves`).

A snapshot integration compares the model's whole result with what the service last
acknowledged, in the warehouse; its snapshot lives in a schema of that warehouse (the
`snapshot` section, set like the write-back's `schema`), since the comparison joins the two.
Every rule here needs only the file; a broken one is a message naming the key.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from engage_sync.config.sections import Frozen

Changes = Literal["cursor", "snapshot"]
OnLeave = Literal["keep", "clear", "delete"]
DEFAULT_MAX_LEAVES = "10%"

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


class SnapshotSection(Frozen):
    """Where the snapshot and a run's pending changes are kept: a schema of the integration's
    own warehouse (default: the connection's own schema)."""

    schema_name: str | None = Field(default=None, alias="schema", min_length=1, max_length=63)


def _max_leaves(value: Any) -> int | str:
    """A number of users (at least 0) or a percentage of the users in the snapshot ('10%')."""
    if isinstance(value, bool):
        raise ValueError("give a number of users or a percentage such as '10%'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must be 0 or more")
        return value
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    match = _PERCENT.match(text)
    if match is None or float(match.group(1)) > 100:
        raise ValueError("give a number of users or a percentage from 0% to 100%, such as '10%'")
    return f"{match.group(1)}%"


MaxLeaves = Annotated[int | str, BeforeValidator(_max_leaves)]


def leave_cap(max_leaves: int | str, held: int) -> int:
    """How many users a run may clear or delete, of `held` users in the snapshot."""
    if isinstance(max_leaves, int):
        return max_leaves
    return int(float(max_leaves.rstrip("%")) * held / 100)


def snapshot_problem(changes: Changes, kind: str, mapped: bool, sub_groups: bool,
                     partitions: int, lookback: bool, set_keys: set[str],
                     on_leave: OnLeave = "keep", identifier: str | None = None) -> str | None:
    """Why these settings cannot hold together, naming the key, or None. `set_keys`: the
    snapshot keys the file gives (`on_leave`, `max_leaves`, `snapshot`)."""
    if changes == "cursor":
        given = sorted(set_keys & {"on_leave", "max_leaves", "snapshot"})
        if given:
            return (f"'{given[0]}' applies to 'changes: snapshot' only; add 'changes: snapshot' "
                    "(the model's whole result compared with the snapshot) or remove it")
        return None
    if kind not in ("attributes", "audience"):
        return (f"'changes: snapshot' is for kinds 'attributes' and 'audience', not '{kind}'; "
                "set 'changes: cursor' (the default)")
    if not mapped:
        return ("'changes: snapshot' needs 'mapping' (an identifier and attribute columns), "
                "not the payload format")
    if sub_groups:
        return "'changes: snapshot' does not take 'mapping.subscription_groups'"
    if partitions > 1:
        return f"'partitions' ({partitions}): a 'changes: snapshot' run is not partitioned"
    if lookback:
        return "'lookback' needs a cursor; remove it with 'changes: snapshot'"
    if on_leave == "delete" and identifier in ("email", "phone"):
        return (f"'on_leave: delete' deletes users by external_id, user_alias or "
                f"platform_id, not by {identifier}; use 'on_leave: clear'")
    return None
