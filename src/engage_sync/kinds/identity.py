"""Identity operations: deletes, identify, merges and alias renames. Rows → items → requests.
Pure.

Items and endpoints:
- deletes → /users/delete; the item is one identifier in `external_ids`, `user_aliases`,
  `platform_ids` or `email_addresses` ({email, prioritization});
- identify → /users/identify; `aliases_to_identify` ({external_id, user_alias}) or
  `emails_to_identify` ({external_id, email, prioritization}); the item names both users;
- merges → /users/merge; `merge_updates` ({identifier_to_merge, identifier_to_keep}, nothing
  else); each identifier holds exactly one of external_id, user_alias, email, phone_number,
  with `prioritization` for email and phone; the item names both users (`USER_SEP`);
- alias_renames → /users/alias/update; `alias_updates` ({alias_label, old_alias_name,
  new_alias_name}); the item names the old and the new alias.

Packing invariants (property-tested): at most `ids_per_request` (≤ 50) items per request; a
delete request holds one identifier kind (cut when the kind changes); identify, merge and
rename requests never hold two items touching one user (the service does not promise an order
inside a request, so such rows go to consecutive requests, which the sender never has in
flight together); items stay in row order and each is in exactly one request.

Rows the service would refuse with 400 (the four /users/merge messages among them) are
rejected here with the column at fault, so a valid row never causes a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from engage_sync import validate as v
from engage_sync.config.integration import Integration
from engage_sync.config.sections import (
    AliasRenameSpec,
    DeleteSpec,
    IdentifySpec,
    MergeSide,
    MergeSpec,
    UserColumns,
)
from engage_sync.items import USER_SEP, Item, TransformResult, users_of
from engage_sync.kinds.base import Kind
from engage_sync.kinds.rows import Outcomes, Rows, UserRef, read_users, user_name
from engage_sync.pack.batching import ListPacker, Packer, build_arrays

DELETE = "/users/delete"
IDENTIFY = "/users/identify"
MERGE = "/users/merge"
ALIAS_UPDATE = "/users/alias/update"

DELETE_LISTS = {"external_id": "external_ids", "user_alias": "user_aliases",
                "platform_id": "platform_ids", "email": "email_addresses"}
MERGE_FIELDS = {"external_id": "external_id", "user_alias": "user_alias", "email": "email",
                "phone": "phone_number"}


def _limit(integration: Integration) -> int:
    return integration.service.limits.ids_per_request


def _start(integration: Integration, batch: pa.RecordBatch, first_seq: int
           ) -> tuple[Rows, Outcomes]:
    rows = Rows(batch)
    return rows, Outcomes(first_seq, rows.keys(integration.key_columns))


def _users(item: Item) -> tuple[str, ...]:
    return users_of(item)


# --- deletes ---------------------------------------------------------------------------------


def transform_deletes(integration: Integration, batch: pa.RecordBatch, first_seq: int
                      ) -> TransformResult:
    spec = integration.kind_spec
    assert isinstance(spec, DeleteSpec)
    rows, out = _start(integration, batch, first_seq)
    prioritization = list(spec.prioritization or ())
    for i, ref in enumerate(read_users(spec.columns, rows)):
        if isinstance(ref, str):
            out.reject(i, ref)
            continue
        value: Any = ref.value
        if ref.kind == "email":
            value = {"email": ref.value, "prioritization": prioritization}
        out.item(i, ref.user, DELETE_LISTS[ref.kind], value)
    return out.result()


def delete_packer(integration: Integration) -> Packer:
    return ListPacker(DELETE, _limit(integration), build_arrays,
                      compatible=lambda a, b: a.array == b.array)


# --- identify --------------------------------------------------------------------------------


def transform_identify(integration: Integration, batch: pa.RecordBatch, first_seq: int
                       ) -> TransformResult:
    spec = integration.kind_spec
    assert isinstance(spec, IdentifySpec)
    rows, out = _start(integration, batch, first_seq)
    who = UserColumns(alias_name=spec.alias_name, alias_label=spec.alias_label, email=spec.email)
    external_ids = rows(spec.external_id)
    prioritization = list(spec.prioritization or ())
    for i, ref in enumerate(read_users(who, rows)):
        ext = external_ids[i]
        problem = ref if isinstance(ref, str) else (
            f"{spec.external_id} is missing (NULL)" if ext is None
            else v.check_external_id(ext, spec.external_id))
        if problem is not None:
            out.reject(i, problem)
            continue
        assert isinstance(ref, UserRef)
        user = ref.user + USER_SEP + user_name("external_id", ext)
        if ref.kind == "user_alias":
            out.item(i, user, "aliases_to_identify", {"external_id": ext, "user_alias": ref.value})
        else:
            out.item(i, user, "emails_to_identify",
                     {"external_id": ext, "email": ref.value, "prioritization": prioritization})
    return out.result()


def identify_packer(integration: Integration) -> Packer:
    return ListPacker(IDENTIFY, _limit(integration),
                      lambda items: build_arrays(items, always=("aliases_to_identify",)),
                      conflicts=_users)


# --- merges ----------------------------------------------------------------------------------


def _identifier(ref: UserRef, side: MergeSide) -> dict[str, Any]:
    obj: dict[str, Any] = {MERGE_FIELDS[ref.kind]: ref.value}
    if ref.kind in ("email", "phone"):
        obj["prioritization"] = list(side.prioritization or ())
    return obj


def transform_merges(integration: Integration, batch: pa.RecordBatch, first_seq: int
                     ) -> TransformResult:
    spec = integration.kind_spec
    assert isinstance(spec, MergeSpec)
    rows, out = _start(integration, batch, first_seq)
    merges, keeps = read_users(spec.merge, rows), read_users(spec.keep, rows)
    for i, (merge, keep) in enumerate(zip(merges, keeps, strict=True)):
        if isinstance(merge, str) or isinstance(keep, str):
            out.reject(i, f"identifier_to_merge: {merge}" if isinstance(merge, str)
                       else f"identifier_to_keep: {keep}")
            continue
        if merge.user == keep.user:
            out.reject(i, "identifier_to_merge and identifier_to_keep name the same user")
            continue
        update = {"identifier_to_merge": _identifier(merge, spec.merge),
                  "identifier_to_keep": _identifier(keep, spec.keep)}
        out.item(i, merge.user + USER_SEP + keep.user, "merge_updates", update)
    return out.result()


def merge_packer(integration: Integration) -> Packer:
    return ListPacker(MERGE, _limit(integration), build_arrays, conflicts=_users)


# --- alias renames ---------------------------------------------------------------------------


def transform_alias_renames(integration: Integration, batch: pa.RecordBatch, first_seq: int
                            ) -> TransformResult:
    spec = integration.kind_spec
    assert isinstance(spec, AliasRenameSpec)
    rows, out = _start(integration, batch, first_seq)
    label_col = spec.label_source
    labels = rows(label_col) if label_col else [spec.alias_label] * rows.n
    olds, news = rows(spec.old_name_column), rows(spec.new_name_column)
    for i in range(rows.n):
        fields = ((labels[i], label_col or "alias_label"), (olds[i], spec.old_name_column),
                  (news[i], spec.new_name_column))
        problem = next((f"{col} is missing (NULL)" if value is None
                        else v.check_external_id(value, col)
                        for value, col in fields
                        if value is None or v.check_external_id(value, col)), None)
        if problem is not None:
            out.reject(i, problem)
            continue
        old = {"alias_label": labels[i], "alias_name": olds[i]}
        new = {"alias_label": labels[i], "alias_name": news[i]}
        user = user_name("user_alias", old) + USER_SEP + user_name("user_alias", new)
        out.item(i, user, "alias_updates", {"alias_label": labels[i],
                                            "old_alias_name": olds[i],
                                            "new_alias_name": news[i]})
    return out.result()


def alias_rename_packer(integration: Integration) -> Packer:
    return ListPacker(ALIAS_UPDATE, _limit(integration), build_arrays, conflicts=_users)


# --- the kinds -------------------------------------------------------------------------------


def _columns(integration: Integration) -> list[str]:
    return list(integration.kind_spec.data_columns())


def _fixed(endpoint: str) -> Callable[[Integration], str]:
    return lambda _: endpoint


IDENTIFY_KIND = Kind(name="identify", rank=10, idempotent=True, columns=_columns,
                     transform=transform_identify, packer=identify_packer,
                     endpoint=_fixed(IDENTIFY), section="identify")
MERGES = Kind(name="merges", rank=20, idempotent=True, columns=_columns,
              transform=transform_merges, packer=merge_packer, endpoint=_fixed(MERGE),
              section="merges")
ALIAS_RENAMES = Kind(name="alias_renames", rank=25, idempotent=True, columns=_columns,
                     transform=transform_alias_renames, packer=alias_rename_packer,
                     endpoint=_fixed(ALIAS_UPDATE), section="alias_renames")
DELETES = Kind(name="deletes", rank=100, idempotent=True, columns=_columns,
               transform=transform_deletes, packer=delete_packer, endpoint=_fixed(DELETE),
               section="deletes", irreversible=True)
