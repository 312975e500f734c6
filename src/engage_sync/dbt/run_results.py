"""dbt's `run_results.json`: which nodes an invocation built, and which failed or were skipped;
and whether an integration's model must be skipped after it.

Invariants: a model is held back when it, or any of its parents, errored, failed or was
skipped in the run, or when a test on one of them errored or failed (`dbt build` skips the
children of a failed test; the model itself is then suspect too); a node the run did not
touch is never a reason to hold back, so a run of a subset of the project holds back only
what it broke. The reason names the first culprit, nearest first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engage_sync.dbt.lineage import ancestors, tests_of
from engage_sync.dbt.manifest import Manifest, ManifestError

BAD = frozenset({"error", "fail", "skipped", "runtime error"})
"""Statuses of a node or test result that hold back what depends on it."""
BUILT = frozenset({"success"})


@dataclass(frozen=True)
class RunResults:
    statuses: Mapping[str, str]
    """unique id → status, lower case, as the run left it."""
    generated_at: str
    invocation_id: str

    def built(self) -> set[str]:
        """The nodes this run built successfully (models, seeds, snapshots)."""
        return {uid for uid, status in self.statuses.items() if status in BUILT}

    def describe(self) -> str:
        return (f"the dbt run {self.invocation_id or '(no invocation id)'} "
                f"of {self.generated_at or 'unknown time'}")


def parse_run_results(raw: Any) -> RunResults:
    """A run_results.json as loaded → RunResults; ManifestError when it has no `results`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("results"), list):
        raise ManifestError("not a dbt run_results.json (no 'results' list)")
    statuses = {str(r["unique_id"]): str(r.get("status") or "").lower()
                for r in raw["results"] if isinstance(r, dict) and "unique_id" in r}
    meta = raw.get("metadata") or {}
    return RunResults(statuses, str(meta.get("generated_at") or ""),
                      str(meta.get("invocation_id") or ""))


def held_back(manifest: Manifest, results: RunResults, unique_id: str) -> str | None:
    """Why the integration reading `unique_id` must not run after this dbt run, or None."""
    model = manifest.nodes[unique_id].name if unique_id in manifest.nodes else unique_id
    chain = [unique_id, *ancestors(manifest, unique_id)]
    tests = tests_of(manifest, set(chain))
    bad = [(uid, results.statuses[uid]) for uid in chain if results.statuses.get(uid) in BAD]
    if bad:
        uid, status = bad[0]
        whose = _whose(manifest, model, unique_id, uid)
        reason = f"{whose} {_verb(status)} in {results.describe()}"
        root = next((u for u, s in bad if s != "skipped"), None)
        if status == "skipped" and root is not None:
            reason += f" (upstream, {_name(manifest, root)} failed)"
        return reason
    for uid in chain:
        for test, tested in tests.items():
            if tested == uid and results.statuses.get(test) in ("error", "fail"):
                return (f"{_whose(manifest, model, unique_id, uid)} failed its test "
                        f"{_name(manifest, test)} in {results.describe()}")
    return None


def _whose(manifest: Manifest, model: str, unique_id: str, uid: str) -> str:
    return f"model {model}" + ("" if uid == unique_id else f"'s parent {_name(manifest, uid)}")


def _name(manifest: Manifest, unique_id: str) -> str:
    node = manifest.nodes.get(unique_id)
    return node.name if node is not None else unique_id


def _verb(status: str | None) -> str:
    return "was skipped" if status == "skipped" else "failed"
