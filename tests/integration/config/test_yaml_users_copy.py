"""YAML that users copy works: every YAML block of the README and of docs/warehouses.md, and every file under config/ is
read as engage-sync reads files (`${VAR}` references in flow style included) and accepted:
an integration by the config model, a fragment of one merged into a minimal integration, a
list of fault rules by the sandbox, the sandbox's seed by the sandbox."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from engage_sandbox.state.faults import parse_rules
from engage_sandbox.state.seed import load_seed
from engage_sync.config import yaml_text
from engage_sync.config.files import load_integration, parse_integration

ROOT = Path(__file__).resolve().parents[3]
BLOCKS = [block for page in ("README.md", "docs/warehouses.md")
          for block in re.findall(r"```ya?ml\n(.*?)```", (ROOT / page).read_text(), re.S)]
BASE = {"kind": "attributes", "source": {"table": "USERS_SYNC"}}


def _merged(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in part.items():
        out[key] = (_merged(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out


def _accept(doc: Any, where: str) -> None:
    """Accepted as engage-sync would take it (`where` names it in a failure)."""
    if isinstance(doc, list):  # the sandbox's fault rules
        assert parse_rules(doc), where
        return
    assert isinstance(doc, dict), where
    raw = doc if "kind" in doc else _merged(BASE, doc)
    if raw.get("task_runner", {}).get("type") == "dask":  # a budget all workers share
        raw = _merged({"service": {"rate_budget": {"backend": "redis",
                                                   "url": "redis://127.0.0.1:1/0"}}}, raw)
    parse_integration(raw, file="readme_block.yaml")


def test_the_readme_has_yaml_blocks() -> None:
    assert len(BLOCKS) >= 7


@pytest.mark.parametrize("n", range(len(BLOCKS)))
def test_every_yaml_block_of_the_readme_is_accepted(n: int) -> None:
    for k, doc in enumerate(yaml_text.load_all(BLOCKS[n])):
        _accept(doc, f"README block {n} document {k}")


@pytest.mark.parametrize("path", sorted((ROOT / "config").rglob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_file_under_config_is_accepted(path: Path) -> None:
    if path.name == "sandbox-seed.yaml":
        assert load_seed(path) is not None
        return
    load_integration(path)


def test_a_reference_reads_as_its_text_in_block_and_flow_style_quoted_or_not() -> None:
    text = ("a: ${A}\n"
            "b: {url: ${B}, other: x}\n"
            "c: [${C:-c d}, '${D}']\n"
            'e: "x${E}y"\n')
    assert yaml_text.load(text) == {"a": "${A}", "b": {"url": "${B}", "other": "x"},
                                    "c": ["${C:-c d}", "${D}"], "e": "x${E}y"}
