"""`on_leave` for an integration with a cursor: the rules of its periodic check that reads
only keys (the `leave_check: {every: 1d}` section is `config.integration.LeaveCheck`). Pure.

A cursor integration sees a row only when its `UPDATED_AT` moves, never its absence; so every
`leave_check.every`, after the run, its identifier column is read whole (nothing else) and
compared with the users of the last check: who is gone is a leaver, handled as a
`changes: snapshot` integration's leavers are (`on_leave`, `max_leaves`, `max_deletes`).
What engage-sync set on a leaver is what its field record holds, so the check needs
`diff: fields` (the default).
"""

from __future__ import annotations


def leave_check_problem(on_leave: str, checks: bool, set_keys: set[str], kind: str,
                        mapped: bool, diff: str, partitions: int,
                        identifier: str | None) -> str | None:
    """Why a cursor integration's leave settings cannot hold together, naming the key, or
    None. `checks`: a `leave_check` section is given; `set_keys`: the keys the file gives."""
    if on_leave == "keep":
        given = sorted(set_keys & {"leave_check", "max_leaves"})
        if given:
            return (f"'{given[0]}' applies with 'on_leave: clear' or 'on_leave: delete' only; "
                    "set one or remove it")
        return None
    if not checks:
        return (f"'on_leave' ({on_leave}) with a cursor needs 'leave_check' (how often the "
                "source's identifiers are read to find who left, such as "
                "'leave_check: {every: 1d}'), or 'changes: snapshot'")
    if kind != "attributes" or not mapped:
        return "'leave_check' is for kind 'attributes' with 'mapping' (not the payload format)"
    if diff != "fields":
        return ("'leave_check' needs 'diff: fields' (the default): the field record says "
                "which attributes engage-sync set on a user who left")
    if partitions > 1:
        return f"'leave_check': a partitioned integration ('partitions': {partitions}) has none"
    if on_leave == "delete" and identifier in ("email", "phone"):
        return (f"'on_leave: delete' deletes users by external_id, user_alias or "
                f"platform_id, not by {identifier}; use 'on_leave: clear'")
    return None
