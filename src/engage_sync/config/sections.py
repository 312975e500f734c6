"""Config sections of the kinds beyond /users/track: subscriptions and identity operations.

Each section names the columns its kind reads and answers three questions for `config` and
`kinds`: which columns to read (`data_columns`), which columns make a row unique within one
cursor value by default (`key_columns`), and why that default cannot be used (`key_problem`:
a column that is NULL in some rows cannot order the compound cursor).

Invariants: a section that validates never yields a request the service refuses for its shape:
identifier kinds the endpoint does not take are refused here, and every email or phone
identifier has a valid `prioritization` (non-empty, no repeats, at most one of `identified` and
`unidentified`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engage_sync import validate

Priority = Literal["identified", "unidentified", "most_recently_updated"]
UserKind = Literal["external_id", "user_alias", "platform_id", "email", "phone"]

#: The service's user-delete sync format: identifier kind → its columns.
DELETE_FORMAT_COLUMNS: dict[str, tuple[str, ...]] = {
    "external_id": ("EXTERNAL_ID",),
    "user_alias": ("ALIAS_NAME", "ALIAS_LABEL"),
    "platform_id": ("BRAZE_ID",),
    "email": ("EMAIL",),
}

KIND_SECTIONS = ("subscriptions", "deletes", "identify", "merges", "alias_renames")


FROZEN = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)
"""Every config model: frozen, no unknown keys, and no input value in a validation error (a
file may hold a pasted secret; the errors reach logs, run records and Prefect's database)."""


class Frozen(BaseModel):
    """The base of every config model: frozen, unknown keys refused, input never echoed."""

    model_config = FROZEN


def check_prioritization(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Non-empty, no value twice, at most one of 'identified' and 'unidentified'."""
    problem = None if value is None else validate.check_prioritization(value, "'prioritization'")
    if problem is not None:
        raise ValueError(problem)
    return value


class UserColumns(Frozen):
    """Columns that name a user; a row fills exactly one identifier (alias: both columns)."""

    external_id: str | None = None
    alias_name: str | None = None
    alias_label: str | None = None
    platform_id: str | None = None
    email: str | None = None
    phone: str | None = None

    @model_validator(mode="after")
    def _some(self) -> UserColumns:
        if (self.alias_name is None) != (self.alias_label is None):
            raise ValueError("'alias_name' and 'alias_label' go together")
        if not self.kinds():
            raise ValueError("name at least one identifier column: external_id, "
                             "alias_name + alias_label, platform_id, email or phone")
        return self

    def kinds(self) -> list[tuple[UserKind, tuple[str, ...]]]:
        """(identifier kind, its columns) for each configured kind, in a fixed order."""
        out: list[tuple[UserKind, tuple[str, ...]]] = []
        if self.external_id:
            out.append(("external_id", (self.external_id,)))
        if self.alias_name and self.alias_label:
            out.append(("user_alias", (self.alias_name, self.alias_label)))
        for kind in ("platform_id", "email", "phone"):
            column = getattr(self, kind)
            if column:
                out.append((kind, (column,)))
        return out

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for _, cols in self.kinds() for c in cols)

    def refuse(self, kinds: tuple[str, ...], what: str) -> None:
        """Raises ValueError when a configured identifier kind is one of `kinds`."""
        bad = [k for k, _ in self.kinds() if k in kinds]
        if bad:
            raise ValueError(f"{what} cannot name users by {' or '.join(bad)}")


def _single_kind(user: UserColumns, what: str) -> str | None:
    if len(user.kinds()) > 1:
        return f"{what} names several identifier kinds, and all but one are NULL in each row"
    return None


class SubscriptionSpec(Frozen):
    """Subscription-group states: user (external_id, email or phone), group, state.

    `endpoint`: `v2` (/v2/subscription/status/set, many groups per request) or `v1`
    (/subscription/status/set, one group and state per request).
    """

    user: UserColumns = UserColumns(external_id="EXTERNAL_ID")
    group_id: str | None = Field(default=None, min_length=1)
    group_column: str | None = None
    state_column: str = "SUBSCRIPTION_STATE"
    endpoint: Literal["v2", "v1"] = "v2"

    @model_validator(mode="after")
    def _check(self) -> SubscriptionSpec:
        self.user.refuse(("user_alias", "platform_id"), "subscriptions")
        if (self.group_id is None) == (self.group_column is None):
            raise ValueError("give exactly one of 'group_id' (a fixed id) or 'group_column'")
        return self

    def data_columns(self) -> list[str]:
        return [*self.user.columns, *([self.group_column] if self.group_column else []),
                self.state_column]

    def key_columns(self) -> tuple[str, ...]:
        return (*self.user.columns, *([self.group_column] if self.group_column else []))

    def key_problem(self) -> str | None:
        return _single_kind(self.user, "'subscriptions.user'")


class DeleteSpec(Frozen):
    """Users to delete: the service's sync format (`identifiers`: which of its identifier
    columns EXTERNAL_ID, ALIAS_NAME + ALIAS_LABEL, BRAZE_ID, EMAIL the table has) or mapped
    columns (`user`). Email identifiers need `prioritization`."""

    identifiers: tuple[Literal["external_id", "user_alias", "platform_id", "email"], ...] | \
        None = None
    user: UserColumns | None = None
    prioritization: tuple[Priority, ...] | None = None

    _prioritization = field_validator("prioritization")(check_prioritization)

    @model_validator(mode="after")
    def _check(self) -> DeleteSpec:
        if self.identifiers is not None and self.user is not None:
            raise ValueError("give 'identifiers' (the service's sync format) or 'user' "
                             "(mapped columns), not both")
        if self.identifiers is not None and (
                not self.identifiers or len(set(self.identifiers)) != len(self.identifiers)):
            raise ValueError("'identifiers' must list each identifier kind once")
        self.columns.refuse(("phone",), "deletes")
        if any(k == "email" for k, _ in self.columns.kinds()) and self.prioritization is None:
            raise ValueError("deleting by email needs 'prioritization' (for example "
                             "[identified, most_recently_updated])")
        return self

    @property
    def columns(self) -> UserColumns:
        if self.user is not None:
            return self.user
        kinds = self.identifiers or ("external_id",)
        names = {"external_id": "external_id", "platform_id": "platform_id", "email": "email"}
        fields: dict[str, str] = {}
        for kind in kinds:
            cols = DELETE_FORMAT_COLUMNS[kind]
            if kind == "user_alias":
                fields["alias_name"], fields["alias_label"] = cols
            else:
                fields[names[kind]] = cols[0]
        return UserColumns(**fields)

    def data_columns(self) -> list[str]:
        return list(self.columns.columns)

    def key_columns(self) -> tuple[str, ...]:
        return self.columns.columns

    def key_problem(self) -> str | None:
        return _single_kind(self.columns, "'deletes'")


class IdentifySpec(Frozen):
    """Alias-only users to identify: (alias_name, alias_label, external_id) rows and/or
    (email, external_id) rows with `prioritization`; a row uses its alias when both alias
    columns are filled, else its email."""

    external_id: str = "EXTERNAL_ID"
    alias_name: str | None = None
    alias_label: str | None = None
    email: str | None = None
    prioritization: tuple[Priority, ...] | None = None

    _prioritization = field_validator("prioritization")(check_prioritization)

    @model_validator(mode="after")
    def _check(self) -> IdentifySpec:
        if (self.alias_name is None) != (self.alias_label is None):
            raise ValueError("'alias_name' and 'alias_label' go together")
        if self.alias_name is None and self.email is None:
            raise ValueError("name 'alias_name' + 'alias_label' or 'email' (or both)")
        if self.email is not None and self.prioritization is None:
            raise ValueError("identifying by email needs 'prioritization'")
        return self

    def data_columns(self) -> list[str]:
        return [c for c in (self.alias_name, self.alias_label, self.email, self.external_id) if c]

    def key_columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.alias_label, self.alias_name, self.email) if c)

    def key_problem(self) -> str | None:
        if self.alias_name is not None and self.email is not None:
            return "'identify' reads an alias or an email per row, so one of them is NULL"
        return None


class MergeSide(UserColumns):
    """One side of a merge: its identifier columns and, for email or phone, `prioritization`."""

    prioritization: tuple[Priority, ...] | None = None

    _prioritization = field_validator("prioritization")(check_prioritization)

    @model_validator(mode="after")
    def _check(self) -> MergeSide:
        self.refuse(("platform_id",), "merges")
        if any(k in ("email", "phone") for k, _ in self.kinds()) and self.prioritization is None:
            raise ValueError("merging by email or phone needs 'prioritization'")
        return self


class MergeSpec(Frozen):
    """Pairs of users: `merge` (merged into the other, then removed) and `keep`."""

    merge: MergeSide
    keep: MergeSide

    def data_columns(self) -> list[str]:
        return list(dict.fromkeys([*self.merge.columns, *self.keep.columns]))

    def key_columns(self) -> tuple[str, ...]:
        return self.merge.columns

    def key_problem(self) -> str | None:
        return _single_kind(self.merge, "'merges.merge'")


class AliasRenameSpec(Frozen):
    """Alias renames: label (a fixed `alias_label` or `label_column`), old and new name."""

    alias_label: str | None = Field(default=None, min_length=1)
    label_column: str | None = None
    old_name_column: str = "OLD_ALIAS_NAME"
    new_name_column: str = "NEW_ALIAS_NAME"

    @model_validator(mode="after")
    def _check(self) -> AliasRenameSpec:
        if self.alias_label is not None and self.label_column is not None:
            raise ValueError("give 'alias_label' (a fixed label) or 'label_column', not both")
        return self

    @property
    def label_source(self) -> str | None:
        """The label column, or None when the label is fixed."""
        if self.alias_label is not None:
            return None
        return self.label_column or "ALIAS_LABEL"

    def data_columns(self) -> list[str]:
        return [c for c in (self.label_source, self.old_name_column, self.new_name_column) if c]

    def key_columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.label_source, self.old_name_column) if c)

    def key_problem(self) -> str | None:
        return None


KindSpec = SubscriptionSpec | DeleteSpec | IdentifySpec | MergeSpec | AliasRenameSpec
