"""The row formats of the /users/track kinds (attributes, events, purchases): the service's
own sync format (`payload`), or columns mapped to an identifier and to attributes, an event
or a purchase (`mapping`). Frozen models; a bad value is a ValidationError that
`config.files.parse_integration` turns into a ConfigError naming the key.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from engage_sync.config.sections import Frozen, UserColumns

IdentifierKind = Literal["external_id", "user_alias", "platform_id", "email", "phone"]


class PayloadFormat(Frozen):
    """The service's own warehouse-sync format: UPDATED_AT, one identifier, JSON PAYLOAD."""

    identifier: IdentifierKind = "external_id"
    payload_column: str = "PAYLOAD"


class EventMapping(Frozen):
    name: str | None = None
    name_column: str | None = None
    time: str | None = None
    app_id: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_name(self) -> EventMapping:
        if (self.name is None) == (self.name_column is None):
            raise ValueError("give exactly one of 'name' (a fixed event name) or 'name_column'")
        return self


class PurchaseMapping(Frozen):
    product_id: str
    currency: str
    price: str
    quantity: str | None = None
    time: str | None = None
    app_id: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)


class Identifier(UserColumns):
    """Mapped format of attributes, events and purchases: the user's column(s), of exactly one
    identifier kind (the columns and their checks are those of every kind's `UserColumns`)."""

    @model_validator(mode="after")
    def _one_kind(self) -> Identifier:
        if len(self.kinds()) != 1:
            raise ValueError(
                "name exactly one identifier: external_id, alias_name + alias_label, "
                "platform_id, email or phone"
            )
        return self

    @property
    def kind(self) -> IdentifierKind:
        return self.kinds()[0][0]


class TrackGroup(Frozen):
    """One subscription group set through /users/track attributes: a fixed `group_id` or a
    `group_column`, and the `state_column` (subscribed / unsubscribed; NULL = leave as is)."""

    group_id: str | None = Field(default=None, min_length=1)
    group_column: str | None = None
    state_column: str

    @model_validator(mode="after")
    def _one_group(self) -> TrackGroup:
        if (self.group_id is None) == (self.group_column is None):
            raise ValueError("give exactly one of 'group_id' (a fixed id) or 'group_column'")
        return self

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.group_column, self.state_column) if c)


class MappedFormat(Frozen):
    """Any table or query: columns mapped to the identifier and to attributes / event / purchase.

    `subscription_groups` (attributes kind only) adds `subscription_groups` to each attributes
    object, one entry per listed group whose state is not NULL in the row.
    """

    identifier: Identifier
    attributes: dict[str, str] = Field(default_factory=dict)
    subscription_groups: tuple[TrackGroup, ...] = ()
    event: EventMapping | None = None
    purchase: PurchaseMapping | None = None

    @property
    def subscription_group_columns(self) -> list[str]:
        return [c for g in self.subscription_groups for c in g.columns]
