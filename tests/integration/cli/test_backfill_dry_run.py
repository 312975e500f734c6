"""A backfill's dry run predicts the backfill: `engage-sync backfill
--dry-run` first, then the real backfill chunk by chunk with its chunk runs' parameters; they
agree on rows read, requests and data points, chunk by chunk (the runs' records) and in all
(the sandbox's counters), diffed against the field record and with `--send-whole`. Real
DuckDB, the sandbox over loopback."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.cli import backfill
from engage_sync.cli.main import main
from engage_sync.config.run_options import run_options
from engage_sync.state.store import StateStore
from tests.integration.conftest import T0, Service, Warehouse, table_integration, user_rows

ROWS = 200
CHANGED = range(0, ROWS, 20)  # rows whose plan changes after the first sync, in both chunks
RANGE = ["--start", "2026-01-01", "--end", "2026-01-01", "--chunk", "12h"]  # T0's day


def _rows() -> list[dict[str, Any]]:
    """ROWS users, one every 5 minutes (both 12-hour chunks), and two rows the run rejects."""
    bad = [{"updated_at": T0 + timedelta(minutes=7 + 600 * k), "external_id": f"bad{k}",
            "payload": "not json"} for k in range(2)]
    return user_rows(ROWS, step=timedelta(minutes=5)) + bad


def _sandbox(service: Service) -> tuple[int, int]:
    """Requests to /users/track and data points billed so far."""
    counters = service.counters()
    requests = sum(n for path, n in counters["requests"].items() if "/users/track" in path)
    return requests, int(counters["data_points"])


def _dry_run(path: Path, state_url: str, send_whole: bool,
             capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`engage-sync backfill ... --dry-run [--send-whole]`: what it prints."""
    capsys.readouterr()
    argv = ["backfill", str(path), *RANGE, "--dry-run", "--state-url", state_url]
    assert main(argv + (["--send-whole"] if send_whole else [])) == 0
    return dict(json.loads(capsys.readouterr().out))


def _real(path: Path, state: StateStore, chunks: list[backfill.Chunk], send_whole: bool
          ) -> list[dict[str, int]]:
    """Each chunk run as the backfill's deployment runs it: its flow parameters, in order."""
    out = []
    for chunk in chunks:
        p = backfill.parameters(chunk, False, send_whole=send_whole)
        record = sync_file(path, store=state, options=run_options(
            p["mode"], datetime.fromisoformat(p["start"]), datetime.fromisoformat(p["end"]),
            p["dry_run"], p["resend_events"], send_whole=p.get("send_whole", False))).record
        assert record is not None and record["mode"] == "backfill"
        out.append({"rows_read": record["rows_read"],
                    "rows_unchanged": record["rows_unchanged"],
                    "requests": state.run(record["run_id"])["requests_sent"],
                    "data_points_sent": record["data_points_sent"],
                    "data_points_saved": record["data_points_saved"]})
    return out


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_backfills_dry_run_predicts_rows_read_requests_and_points_with_and_without_send_whole(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", _rows())
    first = sync_file(path, store=state).record  # the field record holds every user
    assert first is not None and first["rows_synced"] == ROWS
    for i in CHANGED:
        warehouse.execute("UPDATE users_sync SET payload = :p WHERE external_id = :u",
                          p=json.dumps({"plan": "pro", "n": i}), u=f"u{i:05d}")
    chunks = backfill.plan(backfill.parse_bound(RANGE[1], is_end=False),
                           backfill.parse_bound(RANGE[3], is_end=True), RANGE[5])
    assert len(chunks) == 2

    for send_whole in (False, True):
        dry = _dry_run(path, str(state.engine.url), send_whole, capsys)
        before = _sandbox(service)
        real = _real(path, state, chunks, send_whole)
        after = _sandbox(service)
        fields = list(real[0])
        assert [{k: c[k] for k in fields} for c in dry["chunks"]] == real, (send_whole, dry)
        assert dry["rows_read"] == sum(r["rows_read"] for r in real) == ROWS + 2  # rejects too
        sent = (after[0] - before[0], after[1] - before[1])
        assert sent == (dry["requests"], dry["data_points_sent"]), (send_whole, sent, dry)
        assert sent[0] > 0  # something to predict: the changed rows, or every row whole
