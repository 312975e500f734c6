"""Payload-format events and purchases key rows by (identifier, PAYLOAD) by
default; a short payload holding an email or a phone number must not reach the state database,
the logs, the errors listing or the rejects artifact through a row key."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import sync_file
from engage_sync.cli import main as cli
from engage_sync.read import key_digest
from engage_sync.state.store import StateStore
from engage_sync.status.record import run_errors
from tests.integration.conftest import T0, Service, Warehouse, users_table, write_integration

EMAILS = ("ann@example.com", "bob@example.org")
PHONES = ("+15551234567", "+4915112345678")
SECRETS = EMAILS + PHONES

# Positions (the cursor of a row: UPDATED_AT, key values) hold the PAYLOAD as its MD5, ordered
# in the warehouse's SQL (key_digest.py); test_no_payload_value_in_cursors checks them too.
CURSOR_COLUMNS = {("engage_cursors", "cursor"), ("engage_runs", "window_start"),
                  ("engage_runs", "progress"),
                  ("engage_journal", "start_cursor"), ("engage_journal", "end_cursor"),
                  ("engage_row_errors", "position")}


def _rows(kind: str) -> list[dict[str, Any]]:
    """Two good rows and three rejected ones per kind, every payload short and holding an
    email address or a phone number."""
    if kind == "events":
        payloads = [{"name": "signup", "properties": {"email": EMAILS[0]}},
                    {"name": "call", "properties": {"phone": PHONES[0]}},
                    {"name": "x", "time": EMAILS[1]},          # rejected: time not ISO 8601
                    {"nme": PHONES[1]}]                          # rejected: unknown field
    else:
        payloads = [{"product_id": "p1", "currency": "USD", "price": 1,
                     "properties": {"email": EMAILS[0]}},
                    {"product_id": "p2", "currency": "USD", "price": 2,
                     "properties": {"phone": PHONES[0]}},
                    {"product_id": "p3", "currency": "US", "price": 1,  # rejected: currency
                     "properties": {"email": EMAILS[1]}},
                    {"product_id": "p4", "currency": PHONES[1], "price": 1}]  # rejected
    texts = [json.dumps(p) for p in payloads] + [f'{{"email": "{EMAILS[1]}"']  # bad JSON
    return [{"updated_at": T0, "external_id": f"u{n}", "payload": text}
            for n, text in enumerate(texts)]


def _state_texts(state: StateStore) -> dict[tuple[str, str], list[str]]:
    """Every text value of every table of the state database, by (table, column)."""
    found: dict[tuple[str, str], list[str]] = {}
    meta = sa.MetaData()
    meta.reflect(state.engine)
    with state.engine.connect() as conn:
        for table in meta.sorted_tables:
            for row in conn.execute(sa.select(table)).mappings():
                for column, value in row.items():
                    if isinstance(value, str):
                        found.setdefault((table.name, column), []).append(value)
    return found


def _leaks(texts: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    return {where: [s for s in SECRETS if any(s in v for v in values)]
            for where, values in texts.items()
            if any(s in v for v in values for s in SECRETS)}


def _run(kind: str, warehouse: Warehouse, service: Service, state: StateStore,
         folder: Path) -> dict[str, Any]:
    users_table(warehouse, f"{kind}_sync")
    warehouse.insert(f"{kind}_sync", _rows(kind))
    path = write_integration(folder, kind, {
        "kind": kind, "warehouse": {"url": warehouse.url}, "source": {"table": f"{kind}_sync"},
        "service": {"base_url": service.base_url, "retry_deadline_seconds": 60}})
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["rows_synced"], record["rows_rejected"]) == (2, 3), record
    return record


@pytest.mark.parametrize("kind", ["events", "purchases"])
def test_no_payload_value_in_row_keys(
    kind: str, warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    record = _run(kind, warehouse, service, state, tmp_path)
    listing = run_errors(state, record["run_id"])  # what the rejects artifact shows
    assert len(listing) == 3 and all(e["row_key"].count("|sha1:") == 1 for e in listing)
    assert cli.main(["errors", kind, "--state-url", str(state.engine.url)]) == 0
    shown = capsys.readouterr().out
    assert "sha1:" in shown
    said = "\n".join([caplog.text, shown, json.dumps(listing), json.dumps(record, default=str)])
    assert [s for s in SECRETS if s in said] == []
    texts = _state_texts(state)
    assert set(texts) >= {("engage_row_errors", "row_key"), ("engage_row_errors", "reason")}
    assert _leaks({w: v for w, v in texts.items() if w not in CURSOR_COLUMNS}) == {}


@pytest.mark.parametrize("kind", ["events", "purchases"])
def test_no_payload_value_in_cursors(
    kind: str, warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    _run(kind, warehouse, service, state, tmp_path)
    texts = _state_texts(state)
    assert texts[("engage_cursors", "cursor")]  # the cursor was stored, as an MD5
    assert _leaks(texts) == {}


def test_rows_tied_on_time_and_identifier_are_read_once_by_payload_digest(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    """Rows that share UPDATED_AT and the identifier are told apart by the MD5 of PAYLOAD, in
    the warehouse's order and in Python's alike: a second run reads only what is new, and an
    older cursor holding the raw PAYLOAD is turned into its digest."""
    users_table(warehouse, "events_sync")
    rows = [{"updated_at": T0, "external_id": "u1",
             "payload": json.dumps({"name": "e", "properties": {"eid": f"a{n}"}})}
            for n in range(40)]
    warehouse.insert("events_sync", rows)
    path = write_integration(tmp_path, "events", {
        "kind": "events", "warehouse": {"url": warehouse.url},
        "source": {"table": "events_sync"},
        "service": {"base_url": service.base_url, "retry_deadline_seconds": 60},
        "extract_batch_rows": 100})
    first = sync_file(path, store=state).record
    assert first is not None and first["rows_synced"] == 40
    stored = state.cursor("events")
    assert stored is not None and len(str(stored[2])) == 32
    # the last row in the warehouse's order is the greatest digest in Python's: they agree
    assert stored[2] == max(key_digest.python_md5(r["payload"]) for r in rows)
    warehouse.insert("events_sync", [
        {"updated_at": T0, "external_id": "u1",
         "payload": json.dumps({"name": "e", "properties": {"eid": "late"}})}])
    second = sync_file(path, store=state).record
    assert second is not None  # the late row sorts before or after the cursor by its digest
    assert second["rows_read"] == (1 if md5_after(rows, stored) else 0)
    legacy = (stored[0], stored[1], next(r["payload"] for r in rows
                                         if key_digest.python_md5(r["payload"]) == stored[2]))
    assert key_digest.migrate(legacy, ("EXTERNAL_ID", "PAYLOAD"),
                              frozenset({"PAYLOAD"})) == tuple(stored)


def md5_after(rows: list[dict[str, Any]], stored: tuple[Any, ...]) -> bool:
    late = json.dumps({"name": "e", "properties": {"eid": "late"}})
    return key_digest.python_md5(late) > stored[2]
