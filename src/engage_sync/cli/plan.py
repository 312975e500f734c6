"""`engage-sync plan FOLDER --against REF`: what the integration files changed since a Git ref
would do, for a reviewer to read before they are merged (a text report, or `--json` for a pull
request comment).

For each integration file of the folder that differs from REF (`git diff --name-only REF --
FOLDER`, and files Git does not track yet), its old version from `git show REF:path`: the
attributes added and removed, the caps raised, the points its next run would bill, the
attributes the workspace does not define or defines with another type, the caps that run would
pass (`adapters/plan_checks.py`).

Invariants: the plan sends nothing to `/users/track` and records nothing; files outside the
folder, and files of the folder that are not integrations (`_`-prefixed, other extensions),
are never in it; the exit status is 0, or 1 when a run of a changed file would pass a cap
(or a changed file no longer loads), 2 when the plan itself cannot be made (not a Git
repository, an unknown ref).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from engage_sync.errors import ConfigError

EXIT_CAP_PASSED = 1


def add_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan", help="what the integration files changed since a Git ref would do",
        description="For each integration file that differs from REF: attributes added and "
        "removed, the points its next run would bill (the dry run against the warehouse), "
        "caps raised, attributes the workspace does not define or defines with another type. "
        "Exit status 1 when a run would pass a cap.")
    plan.add_argument("folder", help="the folder of integration files")
    plan.add_argument("--against", required=True, metavar="REF",
                      help="the Git ref to compare with (a branch, tag or commit)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--state-url", default=None,
                      help="the state database the next runs use (their cursors and field "
                           "record decide what they would send)")
    plan.set_defaults(func=cmd_plan)


def _git(cwd: Path, *argv: str) -> str:
    try:
        done = subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True,
                              check=False)
    except OSError as exc:
        raise ConfigError(f"plan: cannot run git ({exc.strerror})") from None
    if done.returncode != 0:
        raise ConfigError(f"plan: git {' '.join(argv[:2])} failed: "
                          f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout


def changed_files(folder: Path, ref: str) -> tuple[Path, list[tuple[Path, str]]]:
    """The repository's root, and each changed integration file of the folder with its path
    relative to the root (as `git show REF:path` names it)."""
    from engage_sync.config.files import integration_files

    root = Path(_git(folder, "rev-parse", "--show-toplevel").strip())
    _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    here = folder.resolve().relative_to(root.resolve())
    names = set(_git(root, "diff", "--name-only", ref, "--", str(here)).split())
    names |= set(_git(root, "ls-files", "--others", "--exclude-standard", "--", str(here))
                 .split())
    now = {p.resolve() for p in integration_files(folder)}
    found = []
    for name in sorted(names):
        path = root / name
        if path.parent.resolve() != folder.resolve() or path.name.startswith("_") \
                or path.suffix not in (".yaml", ".yml"):
            continue
        if path.exists() and path.resolve() not in now:
            continue
        found.append((path, name))
    return root, found


def _old(root: Path, ref: str, name: str) -> tuple[Any, str | None]:
    """The file's Integration at REF (None: it did not exist), or why it cannot be read."""
    from engage_sync.config import yaml_text
    from engage_sync.config.files import parse_integration

    done = subprocess.run(["git", "show", f"{ref}:{name}"], cwd=root, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        return None, None
    try:
        return parse_integration(yaml_text.load(done.stdout), file=f"{ref}:{name}"), None
    except Exception as exc:
        return None, f"the version at {ref} does not load: {' '.join(str(exc).split())}"


def plan(folder: Path, ref: str, state_url: str | None) -> dict[str, Any]:
    """The plan as data (what `--json` prints)."""
    from engage_sync.adapters.failures import one_line
    from engage_sync.adapters.plan_checks import check
    from engage_sync.adapters.wiring import open_state
    from engage_sync.config.file_diff import compare
    from engage_sync.config.files import load_integration
    from engage_sync.deliver.definitions import DefinitionsCache

    root, files = changed_files(folder, ref)
    store = open_state(state_url) if files else None
    cache = DefinitionsCache()  # the workspace's definitions read once per service and key
    out: list[dict[str, Any]] = []
    for path, name in files:
        old, old_note = _old(root, ref, name)
        entry: dict[str, Any] = {"file": name, "change": "removed" if not path.exists()
                                 else "added" if old is None and old_note is None
                                 else "changed", "notes": [old_note] if old_note else []}
        new = None
        if path.exists():
            try:
                new = load_integration(path)
            except ConfigError as exc:
                entry["error"] = one_line(exc)
        diff = compare(old, new)
        entry.update(attributes_added=diff.attributes_added,
                     attributes_removed=diff.attributes_removed,
                     caps_raised=[{"cap": c.cap, "from": c.old, "to": c.new}
                                  for c in diff.caps_raised])
        if new is not None and store is not None:
            checks = check(path, new, store, cache)
            entry.update(points=checks.points, rows_read=checks.rows_read,
                         requests=checks.requests, workspace=checks.workspace,
                         caps_passed=checks.caps_passed)
            entry["notes"] += checks.notes
        out.append(entry)
    passed = any(e.get("caps_passed") or e.get("error") for e in out)
    return {"against": ref, "folder": str(folder), "files": out, "caps_passed": passed}


def render(report: dict[str, Any]) -> str:
    files = report["files"]
    if not files:
        return f"no changes: {report['folder']} is as at {report['against']}"
    lines = [f"plan: {len(files)} integration file(s) of {report['folder']} differ from "
             f"{report['against']}"]
    for e in files:
        lines.append(f"\n{e['change']}: {e['file']}")
        if e.get("error"):
            lines.append(f"  ! does not load: {e['error']}")
        for label, key in (("attributes added", "attributes_added"),
                           ("attributes removed", "attributes_removed")):
            if e.get(key):
                lines.append(f"  {label}: {', '.join(e[key])}")
        if e.get("points") is not None:
            lines.append(f"  next run bills {e['points']:,} data points ({e['rows_read']:,} "
                         f"rows read, {e['requests']:,} requests)")
        for cap in e.get("caps_raised", []):
            lines.append(f"  ! cap raised: {cap['cap']} {cap['from']} -> {cap['to']}")
        for problem in e.get("workspace", []):
            lines.append(f"  ! workspace: {problem}")
        for passed in e.get("caps_passed", []):
            lines.append(f"  !! cap passed: {passed}")
        for note in e.get("notes", []):
            lines.append(f"  note: {note}")
    if report["caps_passed"]:
        lines.append("\na run of a changed file would pass a cap, or a file does not load")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise ConfigError(f"plan: {folder} is not a folder of integration files")
    report = plan(folder, args.against, args.state_url)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render(report))
    sys.stdout.flush()
    return EXIT_CAP_PASSED if report["caps_passed"] else 0
