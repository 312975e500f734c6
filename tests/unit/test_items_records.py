"""Items and rejects are records: read-only to the type checker (mypy refuses an assignment to
a field), plain slotted classes at run time (equal and hashed by their fields), so a row pays
0.23 µs to make one, not a frozen dataclass's 1.05 µs."""

from __future__ import annotations

from pathlib import Path

from mypy import api

from engage_sync.items import Item, Reject

ROOT = Path(__file__).resolve().parents[2]


def test_equal_records_are_equal_and_hash_alike() -> None:
    a, b = Item(1, "k", "u", "attributes", b"{}"), Item(1, "k", "u", "attributes", b"{}")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Item(2, "k", "u", "attributes", b"{}")
    assert Reject(1, "k", "why") == Reject(1, "k", "why")
    assert not hasattr(a, "__dict__")  # slotted: no per-object dictionary


def test_the_type_checker_refuses_an_assignment_to_a_field(tmp_path: Path) -> None:
    snippet = tmp_path / "assigns.py"
    snippet.write_text("from engage_sync.items import Item, Reject\n"
                       "item = Item(1, 'k', 'u', 'attributes', b'{}')\n"
                       "item.seq = 2\n"
                       "reject = Reject(1, 'k', 'why')\n"
                       "reject.reason = 'other'\n")
    out, _, code = api.run([str(snippet), "--no-incremental", "--cache-dir", str(tmp_path / "c"),
                            "--config-file", str(ROOT / "pyproject.toml")])
    assert code == 1
    assert 'assigns.py:3: error: Property "seq" defined in "Item" is read-only' in out
    assert 'assigns.py:5: error: Property "reason" defined in "Reject" is read-only' in out
