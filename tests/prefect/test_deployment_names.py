"""`deployments/serve.py` and `deployments/prefect.yaml` never name the same deployment:
`prefect deploy --all` would move served deployments onto the work pool, and stopping
serve.py would then pause them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parents[2]
FLOW_OF_ENTRYPOINT = {"flows/sync.py:sync_integration": "engage-sync",
                      "flows/sync.py:sync_folder": "engage-sync-folder"}


def serve_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("serve", ROOT / "deployments" / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_served_and_work_pool_deployment_names_do_not_collide() -> None:
    serve = serve_module()
    served = {f"{d.flow_name}/{d.name}"
              for per_folder in (False, True)
              for d in serve.build(ROOT / "config" / "demo", per_folder=per_folder, scheds=[],
                                   params={}, tags=[])}
    spec = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    pooled = {f"{FLOW_OF_ENTRYPOINT[d['entrypoint']]}/{d['name']}" for d in spec["deployments"]}
    assert "engage-sync/10_users" in served and "engage-sync-folder/demo" in served
    assert len(pooled) == len(spec["deployments"]) == 4
    assert not served & pooled
