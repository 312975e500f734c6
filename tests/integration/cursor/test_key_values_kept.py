"""A request left in flight by a kill names its rows with their key values as the
source holds them (kept by the exact journal), in doubt or possibly doubled, as the rows a
settled request names (`test_writeback.py`)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from engage_sync.cursor.progress import encode_cursor
from engage_sync.state.records import JournalEntry
from engage_sync.state.store import StateStore

AT = datetime(2026, 1, 1)
KEYS = ("u1|sha1:0011223344556677", "u|2|sha1:8899aabbccddeeff")
VALUES = (encode_cursor(("u1", "0" * 32)), encode_cursor(("u|2", "f" * 32)))


@pytest.mark.parametrize("ending", ["in_doubt", "duplicate"])
def test_rows_of_a_request_left_in_flight_keep_their_key_values(state: StateStore,
                                                                 ending: str) -> None:
    run = state.open_run("events", "incremental", None, AT)
    state.journal_pending(run, [JournalEntry(1, None, (AT, "u|2", "f" * 32), 2, keys=KEYS,
                                             key_values=VALUES)])
    if ending == "in_doubt":
        state.mark_pending_in_doubt(run, "events")
    else:
        state.drop_pending(run, "events", name_duplicates=True)
    kept = {tuple(json.loads(r["key_values"])) for r in state.errors("events")
            if r["kind"] == ending}
    assert kept == {("u1", "0" * 32), ("u|2", "f" * 32)}
