"""A folder's integrations run in their kinds' order: identities first, deletes last."""

from __future__ import annotations

from pathlib import Path

from engage_sync.run.folder import run_order

KINDS = {"a_deletes": "deletes", "b_events": "events", "c_attributes": "attributes",
         "d_merges": "merges", "e_identify": "identify", "f_purchases": "purchases",
         "g_subscriptions": "subscriptions", "h_alias": "alias_renames",
         "i_future": "catalog_items", "j_attributes": "attributes"}


def test_kinds_run_identities_first_and_deletes_last(tmp_path: Path) -> None:
    for name, kind in KINDS.items():
        (tmp_path / f"{name}.yaml").write_text(f"kind: {kind}\n")
    (tmp_path / "k_broken.yaml").write_text("kind: [unclosed\n")
    order = [p.stem for p in run_order(sorted(tmp_path.glob("*.yaml")))]
    assert order == ["e_identify", "d_merges", "h_alias", "g_subscriptions", "c_attributes",
                     "j_attributes", "b_events", "f_purchases", "i_future", "k_broken",
                     "a_deletes"]


