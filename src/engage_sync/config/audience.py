"""The `audience` section of `kind: audience`: which audience each row names, and how the
service keeps a user's memberships (`as: array`, one array attribute of audience names; or
`as: boolean`, one boolean attribute per audience).

An audience integration is always compared with its snapshot (`changes: snapshot`): its
membership is a set of (user, audience) pairs, and a pair that leaves the model is always sent
as leaving (a `remove`, or `false`). The file therefore names neither `changes` nor
`on_leave`: `audience_defaults` sets them before the model is checked. Every rule here needs
only the file; a broken one is a message naming the key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from engage_sync.config.sections import Frozen

AUDIENCE_KIND = "audience"
DEFAULT_PREFIX = "audience_"


class AudienceSection(Frozen):
    """`name_column` (the model's column naming each row's audience) or `name` (the one
    audience of every row); `as: array` keeps the names in the array attribute `attribute`,
    `as: boolean` keeps one boolean attribute `<prefix><name>` per audience."""

    name_column: str | None = Field(default=None, min_length=1)
    name: str | None = Field(default=None, min_length=1, max_length=255)
    attribute: str | None = Field(default=None, min_length=1, max_length=255)
    as_: Literal["array", "boolean"] = Field(alias="as")
    prefix: str = Field(default=DEFAULT_PREFIX, min_length=1, max_length=100)

    def attribute_of(self, audience: str) -> str:
        """The service attribute that keeps membership of `audience`."""
        if self.as_ == "array":
            assert self.attribute is not None  # audience_problem
            return self.attribute
        return f"{self.prefix}{audience}"


def audience_defaults(data: Any) -> Any:
    """A file of kind audience, before validation: `changes: snapshot` and `on_leave: clear`
    set, or a ValueError naming the key the file should not give."""
    if not isinstance(data, dict) or data.get("kind") != AUDIENCE_KIND:
        return data
    if data.get("changes", "snapshot") != "snapshot":
        raise ValueError("kind 'audience' is always compared with its snapshot: remove "
                         "'changes' (or set it to snapshot)")
    if "on_leave" in data:
        raise ValueError("kind 'audience' always sends a user leaving an audience (a "
                         "'remove' of the array, or false): remove 'on_leave'")
    return {**data, "changes": "snapshot", "on_leave": "clear"}


def audience_problem(kind: str, section: AudienceSection | None, mapped_attributes: bool,
                     other_mapping: bool) -> str | None:
    """Why the `audience` section and the kind do not hold together, naming the key, or None.
    `mapped_attributes`: the mapping names attributes; `other_mapping`: it names subscription
    groups, an event or a purchase."""
    if kind != AUDIENCE_KIND:
        return None if section is None else (
            f"'audience' belongs to kind 'audience', not '{kind}'")
    if section is None:
        return ("kind 'audience' needs the 'audience' section, such as "
                "{name_column: AUDIENCE, attribute: audiences, as: array}")
    if mapped_attributes or other_mapping:
        return ("kind 'audience' takes only 'mapping.identifier' (the user); the audience "
                "comes from 'audience.name_column' or 'audience.name'")
    if section.name_column is None and section.name is None:
        return ("'audience.name' is needed when 'audience.name_column' is not given: it "
                "names the integration's one audience")
    if section.name_column is not None and section.name is not None:
        return "give 'audience.name_column' or 'audience.name', not both"
    if section.as_ == "array" and section.attribute is None:
        return "'audience.attribute' is needed with 'as: array': the array attribute's name"
    if section.as_ == "boolean" and section.attribute is not None:
        return ("'audience.attribute' is for 'as: array'; with 'as: boolean' each audience "
                "is the attribute '<audience.prefix><name>'")
    if section.as_ == "array" and "prefix" in section.model_fields_set:
        return "'audience.prefix' is for 'as: boolean'"
    return None
