"""Custom attribute values the workspace does not store: a value whose JSON type cannot be its
attribute's `data_type` in the seed's definitions (`GET /custom_attributes`), and any value of
a `Blocklisted` attribute.

As the service does, such a value is dropped silently: the facts list the reasons an item is
reported for (`errors`), a value of the wrong type is not one of them, and every item not
listed is processed. So the item is processed (and counted, each key sent a data point), its
other attributes are stored, and the answer is the same as had the value been stored.

Invariants: pure; an attribute the seed does not define is kept (the service creates it);
`null` of an active attribute is kept (it unsets whatever the type); a definition whose
`data_type` is not one of the six below is not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engage_sandbox.state.dashboard_seed import CustomAttribute
from engage_sandbox.state.store import is_array_operation


def fits(value: Any, data_type: str) -> bool:
    """Whether a JSON value can be stored in an attribute of `data_type`."""
    if value is None:
        return True
    if data_type == "String":
        return isinstance(value, str)
    if data_type == "Number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if data_type == "Boolean":
        return isinstance(value, bool)
    if data_type == "Time":  # a time as text (`yyyy-MM-ddTHH:mm:ss…`)
        return isinstance(value, str)
    if data_type == "Array":
        return isinstance(value, list) or is_array_operation(value)
    if data_type == "Object":
        return isinstance(value, dict) and not is_array_operation(value)
    return True


def kept(values: dict[str, Any], definitions: Mapping[str, CustomAttribute]) -> dict[str, Any]:
    """`values` less those the workspace drops (see the module's docstring)."""
    if not definitions:
        return values
    return {name: value for name, value in values.items()
            if (d := definitions.get(name)) is None
            or (d.status.casefold() != "blocklisted" and fits(value, d.data_type))}
