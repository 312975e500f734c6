"""`changes: snapshot` in an integration file: what it takes, and each refusal names the file
and the key; `max_leaves` as a number or a share of the snapshot. Pure."""

from __future__ import annotations

from typing import Any

import pytest

from engage_sync.config.files import parse_integration
from engage_sync.config.snapshot import leave_cap
from engage_sync.errors import ConfigError

BASE: dict[str, Any] = {
    "kind": "attributes", "source": {"query": "SELECT * FROM traits"},
    "mapping": {"identifier": {"external_id": "ID"}, "attributes": {"PLAN": "plan"}},
}


def test_a_snapshot_integration_needs_no_cursor_and_defaults_to_keep() -> None:
    i = parse_integration({**BASE, "changes": "snapshot", "snapshot": {"schema": "es"}},
                          file="traits.yaml")
    assert (i.changes, i.on_leave, i.max_leaves, i.snapshot.schema_name) == (  # type: ignore[union-attr]
        "snapshot", "keep", "10%", "es")
    assert parse_integration(BASE, file="t.yaml").changes == "cursor"


@pytest.mark.parametrize(("extra", "key"), [
    ({"on_leave": "clear"}, "'on_leave'"),
    ({"snapshot": {"schema": "x"}}, "'snapshot'"),
    ({"changes": "snapshot", "max_leaves": "ten"}, "'max_leaves'"),
    ({"changes": "snapshot", "max_leaves": -1}, "'max_leaves'"),
    ({"changes": "snapshot", "on_leave": "wipe"}, "'on_leave'"),
    ({"changes": "snapshot", "lookback": "1h"}, "'lookback'"),
    ({"changes": "snapshot", "partitions": 2}, "'partitions'"),
    ({"changes": "sometimes"}, "'changes'"),
])
def test_a_bad_setting_names_the_file_and_the_key(extra: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_integration({**BASE, **extra}, file="traits.yaml")
    assert "traits.yaml" in str(refused.value) and key in str(refused.value)


def test_snapshot_needs_mapped_attributes() -> None:
    for raw in ({**BASE, "kind": "events", "mapping": {**BASE["mapping"], "attributes": {},
                                                        "event": {"name": "x"}}},
                {"kind": "attributes", "source": {"table": "t"}}):
        with pytest.raises(ConfigError, match="changes: snapshot"):
            parse_integration({**raw, "changes": "snapshot"}, file="traits.yaml")


@pytest.mark.parametrize(("setting", "held", "cap"), [
    ("10%", 5000, 500), ("10%", 9, 0), ("2.5%", 1000, 25), (40, 5000, 40), ("100%", 7, 7)])
def test_leave_cap(setting: int | str, held: int, cap: int) -> None:
    assert leave_cap(parse_integration({**BASE, "changes": "snapshot", "max_leaves": setting},
                                       file="t.yaml").max_leaves, held) == cap


def test_delete_on_leave_needs_an_identifier_the_delete_endpoint_takes() -> None:
    email = {**BASE, "mapping": {**BASE["mapping"], "identifier": {"email": "EMAIL"}}}
    with pytest.raises(ConfigError, match="'on_leave: delete'"):
        parse_integration({**email, "changes": "snapshot", "on_leave": "delete"},
                          file="traits.yaml")
    assert parse_integration({**email, "changes": "snapshot", "on_leave": "clear"},
                             file="traits.yaml").on_leave == "clear"
