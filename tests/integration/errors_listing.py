"""`engage-sync errors NAME` read back as rows of its columns, for tests of what it lists."""

from __future__ import annotations

import pytest

from engage_sync.cli import main as cli


def listed(state_url: str, name: str, capsys: pytest.CaptureFixture[str]
           ) -> list[dict[str, str]]:
    """The listing's rows (date, time, kind, partition, row key; the reason left out), or []
    when it says none is recorded. Every row error listed here came from a partitioned run:
    the PARTITION column is asserted."""
    capsys.readouterr()  # what the test printed before is not the listing
    assert cli.main(["errors", name, "--state-url", state_url, "--limit", "100000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    if lines == ["no rejected or failed rows recorded"]:
        return []
    header = lines[0].split()
    assert header[:5] == ["RECORDED", "(UTC)", "KIND", "PARTITION", "ROW"], header
    return [dict(zip(("date", "time", "kind", "partition", "row_key"), line.split()[:5],
                     strict=True)) for line in lines[1:]]
