"""What the list-shaped kinds (subscriptions, identity operations) share: reading a batch's
columns, naming users, collecting one outcome per row. Pure.

Invariants: `Outcomes` holds exactly one Item or one Reject per row, row i with seq
`first_seq + i`, key `render_key` of the integration's key columns; reasons name columns,
never values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from engage_sync import validate as v
from engage_sync.config.sections import UserColumns
from engage_sync.errors import SourceError
from engage_sync.items import Item, Reject, TransformResult, json_blob, render_key


class Rows:
    """The batch's columns by config name, each converted to Python values once."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self.n = batch.num_rows
        self._cache: dict[str, list[Any]] = {}

    def __call__(self, name: str) -> list[Any]:
        """Raises SourceError when the column is named in the integration but not read."""
        if name not in self._cache:
            index = self.batch.schema.get_field_index(name)
            if index < 0:
                raise SourceError(
                    f"column {name!r} is named in the integration but not in the batch")
            self._cache[name] = [as_text(x) for x in self.batch.column(index).to_pylist()]
        return self._cache[name]

    def keys(self, names: tuple[str, ...]) -> list[str]:
        if not names:
            return [""] * self.n
        # raw values, as the pipeline renders cursors: an integer id keys as its digits
        columns = [self.batch.column(self._index(c)).to_pylist() for c in names]
        return [render_key(row) for row in zip(*columns, strict=True)]

    def _index(self, name: str) -> int:
        index = self.batch.schema.get_field_index(name)
        if index < 0:
            raise SourceError(f"column {name!r} is named in the integration but not in the batch")
        return index


def as_text(value: Any) -> Any:
    """Integer ids (a common column type) are sent as their decimal string."""
    return str(value) if type(value) is int else value


@dataclass(frozen=True, slots=True)
class UserRef:
    """A row's user: the identifier kind, its JSON value and the canonical user name."""

    kind: str
    value: Any
    user: str


def user_name(kind: str, value: Any) -> str:
    """The canonical name of a user for the one-request-per-user rule (emails lower-cased)."""
    if kind == "user_alias":
        return f"user_alias:{value['alias_label']}:{value['alias_name']}"
    return f"{kind}:{value.lower() if kind == 'email' else value}"


def read_users(spec: UserColumns, rows: Rows) -> list[UserRef | str]:
    """Per row its one user, or the reason why not (none given, several given, invalid)."""
    kinds = spec.kinds()
    columns = [[rows(c) for c in cols] for _, cols in kinds]
    out: list[UserRef | str] = []
    for i in range(rows.n):
        given = [k for k, cols in enumerate(columns) if any(col[i] is not None for col in cols)]
        if not given:
            names = ", ".join(c for _, cols in kinds for c in cols)
            out.append(f"no identifier: {names} {'is' if len(kinds) == 1 else 'are all'} "
                       "missing (NULL)")
            continue
        if len(given) > 1:
            names = ", ".join(kinds[k][1][0] for k in given)
            out.append(f"more than one identifier given ({names}); give exactly one per row")
            continue
        (k,) = given
        kind, cols = kinds[k]
        out.append(user_ref(kind, [col[i] for col in columns[k]], cols))
    return out


def user_ref(kind: str, values: list[Any], cols: tuple[str, ...]) -> UserRef | str:
    """One identifier from its column values, checked by the service's rules."""
    if kind == "user_alias":
        name, label = values
        for value, col in zip(values, cols, strict=True):
            if value is None:
                return f"{col} is missing (NULL)"
        problem = v.check_alias(name, label, *cols)
        alias = {"alias_name": name, "alias_label": label}
        return problem or UserRef(kind, alias, user_name(kind, alias))
    (value,) = values
    (col,) = cols
    if value is None:
        return f"{col} is missing (NULL)"
    problem = v.check_identifier(kind, value, col)
    return problem or UserRef(kind, value, user_name(kind, value))


class Outcomes:
    """Collects one outcome per row, in row order."""

    def __init__(self, first_seq: int, keys: list[str]) -> None:
        self.first_seq, self.keys = first_seq, keys
        self.items: list[Item] = []
        self.rejects: list[Reject] = []

    def reject(self, i: int, reason: str) -> None:
        self.rejects.append(Reject(self.first_seq + i, self.keys[i], reason))

    def item(self, i: int, user: str, array: str, obj: Any,
             group: tuple[str, ...] = ()) -> None:
        blob = json_blob(obj)
        self.items.append(Item(self.first_seq + i, self.keys[i], user, array, blob, group))

    def result(self) -> TransformResult:
        return TransformResult(self.items, self.rejects)
