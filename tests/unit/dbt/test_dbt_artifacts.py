"""The pure dbt package on hand-made manifests: selectors, the parents of a node, a run's
verdict, relations matched to tables; and an integration placed on its model."""

from __future__ import annotations

from typing import Any

import pytest

from engage_sync.adapters.dbt_models import node_of
from engage_sync.config.files import parse_integration
from engage_sync.dbt.lineage import ancestors
from engage_sync.dbt.manifest import parse_manifest, relation_parts
from engage_sync.dbt.run_results import held_back, parse_run_results
from engage_sync.dbt.selection import SelectorError, parse_selectors, selected
from engage_sync.errors import ConfigError


def node(name: str, parents: list[str] = (), tags: list[str] = (), kind: str = "model",
         path: str = "", schema: str = "main") -> tuple[str, dict[str, Any]]:
    uid = f"{kind}.p.{name}"
    return uid, {"name": name, "resource_type": kind, "schema": schema, "alias": name,
                 "relation_name": f'"db"."{schema}"."{name}"' if kind != "test" else None,
                 "tags": list(tags), "original_file_path": path or f"models/{name}.sql",
                 "depends_on": {"nodes": list(parents)}}


MANIFEST = parse_manifest({"nodes": dict([
    node("a"), node("b", ["model.p.a"]), node("c", ["model.p.a"]),
    node("d", ["model.p.b", "model.p.c", "source.p.raw.t"], tags=["braze"],
         path="models/marts/d.sql"),
    node("e", ["model.p.e2"]), node("e2", ["model.p.e"]),  # a cycle dbt would refuse
    node("not_null_d", ["model.p.d"], kind="test"),
    node("d", kind="seed", schema="other"),
])})


def results(**statuses: str) -> Any:
    return parse_run_results({"metadata": {"invocation_id": "inv", "generated_at": "t"},
                              "results": [{"unique_id": k.replace("__", "."), "status": v}
                                          for k, v in statuses.items()]})


def test_selectors_are_a_union_and_unknown_methods_are_refused() -> None:
    sel = selected(MANIFEST, parse_selectors("tag:braze, model:A path:models/b.sql"))
    assert sel == {"model.p.d", "model.p.a", "model.p.b"}
    assert "model.p.d" in selected(MANIFEST, parse_selectors("path:models/marts"))
    with pytest.raises(SelectorError, match="'tags:braze'"):
        parse_selectors("tags:braze")


def test_ancestors_once_each_nearest_first_cycles_end() -> None:
    assert ancestors(MANIFEST, "model.p.d") == [
        "model.p.b", "model.p.c", "source.p.raw.t", "model.p.a"]
    assert ancestors(MANIFEST, "model.p.e") == ["model.p.e2"]


def test_held_back_by_itself_a_grandparent_or_a_failed_test() -> None:
    assert held_back(MANIFEST, results(model__p__a="success"), "model.p.d") is None
    why = held_back(MANIFEST, results(model__p__a="error", model__p__d="skipped"), "model.p.d")
    assert why == "model d was skipped in the dbt run inv of t (upstream, a failed)"
    why = held_back(MANIFEST, results(model__p__a="error"), "model.p.d")
    assert why is not None and why.startswith("model d's parent a failed")
    why = held_back(MANIFEST, results(test__p__not_null_d="fail"), "model.p.d")
    assert why is not None and "failed its test not_null_d" in why
    assert held_back(MANIFEST, results(model__p__e2="skipped"), "model.p.a") is None


def test_relations_by_table_case_and_quotes() -> None:
    assert relation_parts('"DB"."Main"."Users"') == ["DB", "Main", "Users"]
    assert relation_parts("`proj`.`ds`.`t`") == ["proj", "ds", "t"]
    assert [n.unique_id for n in MANIFEST.for_table("A")] == ["model.p.a"]
    assert [n.unique_id for n in MANIFEST.for_table("b", "MAIN")] == ["model.p.b"]
    assert MANIFEST.for_table("b", "other") == []


def test_an_integration_placed_on_its_model_or_told_why_not() -> None:
    def integration(**extra: Any) -> Any:
        return parse_integration({"kind": "attributes", "source": {"table": "x"}, **extra},
                                 file="f.yaml")

    assert node_of(integration(dbt={"model": "b"}), MANIFEST, "f.yaml") == "model.p.b"
    assert node_of(integration(source={"table": "C"}), MANIFEST, "f.yaml") == "model.p.c"
    assert node_of(integration(source={"table": "nowhere"}), MANIFEST, "f.yaml") is None
    with pytest.raises(ConfigError, match=r"file f.yaml, key source.table: .*2 dbt relations"):
        node_of(integration(source={"table": "d"}), MANIFEST, "f.yaml")
    with pytest.raises(ConfigError, match=r"file f.yaml, key dbt.model: no model named 'z'"):
        node_of(integration(dbt={"model": "z"}), MANIFEST, "f.yaml")
    with pytest.raises(ConfigError, match=r"file f.yaml: key 'dbt.model'"):
        integration(dbt={"model": "bad name!"})
    with pytest.raises(ConfigError, match=r"key 'dbt.modle'"):
        integration(dbt={"modle": "b"})
