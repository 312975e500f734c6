"""Config of the subscription and identity kinds: valid sections parse, bad ones are refused
with the key named, and the demo files of these kinds load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engage_sync.config.files import load_integration, parse_integration
from engage_sync.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def _raw(kind: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "source": {"table": "t"}, **extra}


VALID = [
    (_raw("subscriptions", subscriptions={"group_id": "g"}), ("EXTERNAL_ID",)),
    (_raw("subscriptions", subscriptions={"user": {"email": "E"}, "group_column": "G",
                                          "state_column": "S", "endpoint": "v1"}), ("E", "G")),
    (_raw("deletes"), ("EXTERNAL_ID",)),
    (_raw("deletes", deletes={"identifiers": ["user_alias"]}), ("ALIAS_NAME", "ALIAS_LABEL")),
    (_raw("deletes", row_key=["ID"], max_deletes=5,
          deletes={"identifiers": ["external_id", "email"],
                   "prioritization": ["identified", "most_recently_updated"]}), ("ID",)),
    (_raw("deletes", deletes={"user": {"platform_id": "PID"}}), ("PID",)),
    (_raw("identify", identify={"alias_name": "N", "alias_label": "L"}), ("L", "N")),
    (_raw("identify", identify={"email": "E", "prioritization": ["unidentified"]}), ("E",)),
    (_raw("merges", merges={"merge": {"external_id": "OLD"}, "keep": {
        "phone": "P", "prioritization": ["most_recently_updated"]}}), ("OLD",)),
    (_raw("alias_renames", alias_renames={}), ("ALIAS_LABEL", "OLD_ALIAS_NAME")),
    (_raw("alias_renames", alias_renames={"alias_label": "crm"}), ("OLD_ALIAS_NAME",)),
    (_raw("attributes", mapping={"identifier": {"external_id": "ID"}, "subscription_groups": [
        {"group_id": "g", "state_column": "S"}]}), ("ID",)),
]


@pytest.mark.parametrize(("raw", "key"), VALID)
def test_valid_sections_parse_with_their_default_key(raw: dict[str, Any],
                                                     key: tuple[str, ...]) -> None:
    assert parse_integration(raw, file="x.yaml").key_columns == key


INVALID = [
    (_raw("subscriptions"), "needs the 'subscriptions' section"),
    (_raw("subscriptions", subscriptions={}), "group_id"),
    (_raw("subscriptions", subscriptions={"group_id": "g", "group_column": "G"}), "group_id"),
    (_raw("subscriptions", subscriptions={"group_id": "g", "endpoint": "v3"}),
     "subscriptions.endpoint"),
    (_raw("subscriptions", subscriptions={"group_id": "g", "user": {"platform_id": "P"}}),
     "cannot name users by platform_id"),
    (_raw("subscriptions", subscriptions={"group_id": "g", "user": {
        "email": "E", "phone": "P"}}), "needs 'row_key'"),
    (_raw("deletes", deletes={"identifiers": ["email"]}), "needs 'prioritization'"),
    (_raw("deletes", deletes={"identifiers": ["email"], "prioritization": [
        "identified", "unidentified"]}), "deletes.prioritization"),
    (_raw("deletes", deletes={"identifiers": ["email"], "prioritization": ["newest"]}),
     "deletes.prioritization"),
    (_raw("deletes", deletes={"identifiers": ["phone"]}), "deletes.identifiers"),
    (_raw("deletes", deletes={"user": {"phone": "P"}}), "cannot name users by phone"),
    (_raw("deletes", deletes={"identifiers": ["external_id", "user_alias"]}), "row_key"),
    (_raw("deletes", max_deletes=-1), "max_deletes"),
    (_raw("deletes", mapping={"identifier": {"external_id": "X"}, "attributes": {"a": "a"}}),
     "not from 'payload' or 'mapping'"),
    (_raw("identify", identify={"alias_name": "N"}), "go together"),
    (_raw("identify", identify={"external_id": "X"}), "'alias_name' + 'alias_label' or 'email'"),
    (_raw("identify", identify={"email": "E"}), "needs 'prioritization'"),
    (_raw("merges", merges={"merge": {"email": "E"}, "keep": {"external_id": "K"}}),
     "merges.merge"),
    (_raw("merges", merges={"merge": {"external_id": "M"}, "keep": {"platform_id": "K"}}),
     "merges.keep"),
    (_raw("merges", merges={"merge": {"external_id": "M"}}), "merges.keep"),
    (_raw("alias_renames", alias_renames={"alias_label": "x", "label_column": "L"}),
     "not both"),
    (_raw("attributes", payload={}, merges={"merge": {"external_id": "M"},
                                            "keep": {"external_id": "K"}}),
     "'merges' belongs to kind 'merges'"),
    (_raw("events", mapping={"identifier": {"external_id": "ID"}, "event": {"name": "e"},
                             "subscription_groups": [{"group_id": "g", "state_column": "S"}]}),
     "for kind 'attributes' only"),
    (_raw("attributes", mapping={"identifier": {"external_id": "ID"}, "subscription_groups": [
        {"state_column": "S"}]}), "mapping.subscription_groups.0"),
]


@pytest.mark.parametrize(("raw", "message"), INVALID)
def test_bad_sections_are_refused_naming_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_integration(raw, file="bad.yaml")
    assert message in str(err.value)
    assert "bad.yaml" in str(err.value)


@pytest.mark.parametrize("name", ["05_identify", "06_merges", "07_alias_renames",
                                  "15_subscriptions", "90_deletes"])
def test_demo_files_of_the_kinds_load(name: str) -> None:
    integration = load_integration(ROOT / "config" / "demo" / f"{name}.yaml")
    assert integration.kind_spec.data_columns()


def test_max_deletes_defaults_to_1000() -> None:
    assert parse_integration(_raw("deletes"), file="d.yaml").max_deletes == 1000


def test_the_config_layer_knows_exactly_the_kinds_the_kinds_package_builds() -> None:
    """config.kind_registry is filled by engage_sync.kinds (config never imports a kind):
    built-ins are declared, and register / unregister keep both in step."""
    from dataclasses import replace

    from engage_sync import kinds
    from engage_sync.config import kind_registry

    assert set(kind_registry.names()) == set(kinds.names())
    for name in kinds.names():
        assert kind_registry.facts(name) is kinds.get(name)
    extra = replace(kinds.get("attributes"), name="registry_probe")
    kinds.register(extra)
    try:
        assert kind_registry.facts("registry_probe") is extra
    finally:
        kinds.unregister("registry_probe")
    with pytest.raises(ValueError, match="unknown kind 'registry_probe'; the kinds are"):
        kind_registry.facts("registry_probe")
