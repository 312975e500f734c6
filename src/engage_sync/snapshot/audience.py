"""An audience compared with its snapshot: the model's rows as a set of (user, audience)
memberships, so the snapshot comparison (`snapshot.compare`) finds the pairs that entered
(new) and left, and nothing else.

The memberships are a query over the model made by the warehouse: `SELECT DISTINCT` the
identifier column(s), the audience name (the `name_column`, or `audience.name` as a constant)
as `AUDIENCE`, and a constant `MEMBER` whose digest never changes, so a pair is never
'changed'. The snapshot's key is then (user, audience), and its one "attribute" is membership.
Invariants: a user returned twice for one audience is one membership; what to send of each
pair is the kind's (`kinds.audience`): one object of one key per pair, entering or leaving.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engage_sync.config.integration import Integration
from engage_sync.kinds import Kind
from engage_sync.kinds.audience import AUDIENCE as AUDIENCE_KIND
from engage_sync.kinds.audience import membership_transform
from engage_sync.read.extract import resolve_columns, source_of
from engage_sync.read.source_spec import SourceSpec
from engage_sync.snapshot.layout import CHANGE, LEFT, Attribute, Layout, layout_of

AUDIENCE = "engage_audience"
"""The memberships' audience-name column (text)."""
MEMBER = "engage_member"
"""A constant 1: the digest the snapshot keeps per membership."""


def audience_layout(integration: Integration) -> Layout:
    """The snapshot of an audience integration: keyed by (user, audience). Its membership
    digest is named after where the service keeps memberships (`as` and the attribute, or the
    prefix): a file that moves them elsewhere finds every pair's digest missing, so the next
    run sends every membership again, to the new place."""
    section, audience = integration.snapshot, integration.audience
    assert audience is not None
    kept = f"{audience.as_}:{audience.attribute_of('')}"
    return Layout(
        integration=integration.name,
        schema=section.schema_name if section is not None else None,
        ids=(*integration.identifier_columns, AUDIENCE),
        attributes=(Attribute(MEMBER, kept),),
    )


def membership_select(integration: Integration, spec: SourceSpec, resolved: dict[str, str]
                      ) -> sa.Select[Any]:
    """The model's distinct (user, audience) pairs; `resolved`: the model's column names."""
    audience = integration.audience
    assert audience is not None
    name: sa.ColumnElement[Any] = (
        sa.column(resolved[audience.name_column]) if audience.name_column is not None
        else sa.literal(audience.name))
    return sa.select(
        *(sa.column(resolved[c]).label(c) for c in integration.identifier_columns),
        sa.cast(name, sa.String).label(AUDIENCE),
        sa.literal(1).label(MEMBER),
    ).select_from(source_of(spec)).distinct()


def memberships(conn: Connection, integration: Integration, spec: SourceSpec
                ) -> tuple[SourceSpec, dict[str, str]]:
    """The model as memberships: a query source the comparison reads like a model, and its
    resolved columns. Raises SourceError naming a column the model lacks (the identifier or
    `audience.name_column`)."""
    resolved = resolve_columns(conn, spec)
    select = membership_select(integration, spec, resolved)
    text = str(select.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    columns = (*integration.identifier_columns, AUDIENCE, MEMBER)
    pairs = replace(spec, table=None, schema=None, query=text, columns=columns,
                    key_columns=columns[:-1])
    return pairs, {c: c for c in columns}


def audience_kind(layout: Layout) -> Kind:
    """The audience kind reading `layout`'s pending table: each row entering or leaving."""
    ids = layout.ids

    def columns(integration: Integration) -> list[str]:
        return [*ids, CHANGE]

    return replace(AUDIENCE_KIND, columns=columns,
                   transform=membership_transform(AUDIENCE, CHANGE, LEFT))


def layout_for(integration: Integration) -> Layout:
    """The snapshot layout of any snapshot integration: an audience's, or its attributes'."""
    return audience_layout(integration) if integration.audience is not None else \
        layout_of(integration)


def compared_source(conn: Connection, integration: Integration, spec: SourceSpec
                    ) -> tuple[SourceSpec, dict[str, str]]:
    """What the comparison reads as the model, and its resolved columns: an audience's
    memberships, or the model itself."""
    if integration.audience is not None:
        return memberships(conn, integration, spec)
    return spec, resolve_columns(conn, spec)
