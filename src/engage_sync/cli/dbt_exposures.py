"""`engage-sync dbt-exposures FOLDER`: a dbt exposure YAML per integration of the folder, written
into the dbt project so its docs show which models feed the service.

Invariants: a file `engage_sync_<integration>.yml` per integration that reads a model of the
manifest, in `--out` (default `models/engage_sync_exposures` of `--dbt-project`); an
integration that reads no model is named in one line and gets no file; files of integrations
no longer in the folder are left alone (the folder is the user's to prune).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from engage_sync.dbt.manifest import DEFAULT_MANIFEST


def add_parser(sub: Any) -> None:
    p = sub.add_parser("dbt-exposures", help="write a dbt exposure per integration",
                       description="Write one dbt exposure YAML per integration of the folder "
                       "that reads a dbt model, so the dbt docs show which models feed the "
                       "service.")
    p.add_argument("folder", help="the folder of integration files")
    p.add_argument("--dbt-project", default=os.environ.get("ENGAGE_SYNC_DBT_PROJECT", "."),
                   metavar="DIR", help="the dbt project (default: ENGAGE_SYNC_DBT_PROJECT, "
                                       "else the current folder)")
    p.add_argument("--manifest", default=None, metavar="PATH",
                   help="dbt's manifest.json (default: target/manifest.json of --dbt-project)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="where to write (default: models/engage_sync_exposures of the project)")
    p.set_defaults(func=cmd_dbt_exposures)


def cmd_dbt_exposures(args: argparse.Namespace) -> int:
    import yaml

    from engage_sync.adapters import dbt_models
    from engage_sync.dbt.exposures import exposure, exposure_name

    project = Path(args.dbt_project)
    manifest = dbt_models.read_manifest(args.manifest or project / DEFAULT_MANIFEST)
    out = Path(args.out) if args.out else project / "models" / "engage_sync_exposures"
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for placed in dbt_models.place_folder(args.folder, manifest):
        if placed.unique_id is None:
            print(f"engage-sync: integration {placed.name} reads no dbt model: no exposure",
                  file=sys.stderr)
            continue
        body = exposure(placed.name, placed.integration.kind,
                        manifest.nodes[placed.unique_id].name, placed.path.name)
        target = out / f"{exposure_name(placed.name)}.yml"
        target.write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
        written += 1
    print(f"wrote {written} exposure file(s) to {out}")
    return 0
