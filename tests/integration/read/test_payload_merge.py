"""One object per user per run in the service's own sync format (a JSON PAYLOAD per row): a
user's rows in a run's window are merged, each key from the last row that holds it, and only
the merge is sent, counted at the sandbox; the dry run predicts it; a window read in DuckDB
slices merges across them (each row's EARLIER_ROWS and OTHER_ROWS zero exactly where the whole
window's are); a user whose first row is rejected is carried by its next row; a merge the
service would refuse is not made (the rows are sent in order); a run killed after its progress
passed merged rows, then resumed, leaves every profile at its latest values."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engage_sync.adapters.wiring import sync_file
from engage_sync.config.run_options import RunOptions
from engage_sync.cursor.progress import decode_cursor
from engage_sync.read import extract
from engage_sync.read.extract import stream_batches
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    kill_during_request,
    resume_cli,
    table_integration,
)
from tests.integration.duckdb_reads import count_reads
from tests.integration.read.test_duckdb_later import SPEC, WINDOWS, _engine, _fill

USERS, TWICE = 3000, 1000


def _rows(users: int, twice: int, tail: int = 0) -> list[dict[str, Any]]:
    """`users` users with a first row of two keys; the first `twice` again an hour later,
    half with one key (`plan`), half with two (`plan`, `n`); then `tail` users of one row."""
    rows = [{"updated_at": T0 + timedelta(seconds=i), "external_id": f"p{i:05d}",
             "payload": json.dumps({"plan": "free", "n": i})} for i in range(users)]
    rows += [{"updated_at": T0 + timedelta(hours=1, seconds=i), "external_id": f"p{i:05d}",
              "payload": json.dumps({"plan": "pro"} if i % 2 else
                                    {"plan": "gold", "n": i + 100_000})}
             for i in range(twice)]
    rows += [{"updated_at": T0 + timedelta(hours=2, seconds=i), "external_id": f"t{i:05d}",
              "payload": json.dumps({"plan": "tail", "n": i})} for i in range(tail)]
    return rows


def _merged(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The merged truth: each user's keys, each from its last row that holds it."""
    truth: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r["updated_at"], r["external_id"])):
        truth.setdefault(row["external_id"], {}).update(json.loads(row["payload"]))
    return truth


def _billed(service: Service) -> tuple[int, int]:
    """(objects, attribute keys) the sandbox processed and billed."""
    counters = service.counters()
    return int(counters["attributes_processed"]), int(counters["data_points"])


def _profiles_are(service: Service, truth: dict[str, dict[str, Any]]) -> None:
    profiles = {p["external_id"]: p["attributes"] for p in service.profiles()}
    assert len(profiles) == len(truth)
    wrong = [u for u, keys in truth.items() if profiles.get(u) != keys]
    assert not wrong, (len(wrong), wrong[:3], [profiles.get(u) for u in wrong[:3]])


def _merged_once(warehouse: Warehouse, service: Service, state: StateStore,
                 tmp_path: Path) -> None:
    rows = _rows(USERS, TWICE)
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    dry = sync_file(path, store=state, options=RunOptions(dry_run=True)).dry_run
    assert dry is not None
    summary = dry.summary("users")
    assert (summary["rows_unchanged"], summary["data_points_sent"],
            summary["data_points_saved"]) == (TWICE, 6000, 1500)
    record = sync_file(path, store=state).record
    assert record is not None
    assert _billed(service) == (3000, 6000)  # not 4,000 objects and 7,500 keys
    assert (record["rows_read"], record["rows_synced"], record["rows_unchanged"]) == (
        USERS + TWICE, USERS, TWICE)
    assert (record["data_points_sent"], record["data_points_saved"]) == (6000, 1500)
    _profiles_are(service, _merged(rows))


def test_a_user_with_several_payload_rows_in_a_run_is_sent_once_as_their_merge(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    _merged_once(warehouse, service, state, tmp_path)


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)
def test_a_duckdb_window_read_in_slices_merges_across_them(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same, read in slices of 500 rows: each user's first row in the first slices, its
    later row in the last ones."""
    queries = count_reads(monkeypatch, 500)
    _merged_once(warehouse, service, state, tmp_path)
    assert len(queries) >= 2 * 8  # the dry run's read and the run's, each in 8 slices or more


def _progress_among_tail(state: StateStore) -> Callable[[], bool]:
    """Whether the unfinished run's progress is among the tail users' rows (`t…`): every
    merged row, and every later row, is behind it."""
    def passed() -> bool:
        run = state.unfinished_run("users", "incremental")
        cursor = decode_cursor(run["progress"]) if run is not None else None
        return cursor is not None and str(cursor[-1]).startswith("t")
    return passed


@pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)  # a kill: one is enough
@pytest.mark.parametrize("nth", [20, 60], ids=["among-first-rows", "after-merged-rows"])
def test_killed_and_resumed_every_profile_ends_at_its_latest_values(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path, nth: int,
) -> None:
    """Every user of the first 3,000 has a later row: requests 1-40 carry the merges (75
    objects a request), the later rows are passed without a request, and requests 41-80 carry
    3,000 users of one row after them. Attributes settle in groups (`run/grouped_journal.py`):
    answers are saved 32 at a time, so at a kill up to a group of answered requests may be
    unsettled, and the resumed run sends them again (at least once: attributes are
    idempotent). A kill at a request number alone pins neither how many were answered nor what
    was saved, so each kill waits for what it means:
    - among the first rows: requests 20 and 21 held (as many as `max_in_flight`, so nothing
      more leaves before the kill): 19 answered, none settled; the resumed run reads the
      window again, later rows whose first rows were sent among it (19 requests + 6,000);
    - after the merged rows: request 60 held until the run's progress has passed the merged
      rows and the later rows; the resumed run reads none of them again and sends tail users
      only (at most 79 requests + 39).
    Either way every profile ends at the merge, the resumed run sends each user once at most,
    and fewer objects are sent than rows."""
    rows = _rows(USERS, USERS, tail=USERS)
    path = table_integration(warehouse, service, tmp_path, "attributes", rows,
                             extract_batch_rows=500, service={"max_in_flight": 2})
    warehouse.engine.dispose()  # DuckDB: one process at a time may open the file
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    state = StateStore.from_url(state_url)
    past_merged = nth == 60
    if past_merged:
        kill_during_request(path, service, sandbox_key, state_url, nth=nth,
                            until=_progress_among_tail(state))
    else:
        kill_during_request(path, service, sandbox_key, state_url, nth=nth, hold=2)
    state.engine.dispose()
    before = len(service.requests())
    resume_cli(path, state_url, sandbox_key)
    _profiles_are(service, _merged(rows))
    again = [o["external_id"] for r in service.requests()[before:]
             for o in r["body"]["attributes"]]
    assert len(again) == len(set(again))  # one object per user per run
    if past_merged:
        assert again and all(u.startswith("t") for u in again), sorted(again)[:3]
    objects, _ = _billed(service)
    assert objects < 3 * USERS  # each row sent (at least once): 9,000


def test_a_rejected_first_row_passes_the_merge_on_and_a_refused_merge_sends_each_row(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    wide = [{f"a{n}": n for n in range(130)}, {f"b{n}": n for n in range(130)}]
    rows = [{"updated_at": T0 + timedelta(minutes=m), "external_id": user, "payload": payload}
            for m, (user, payload) in enumerate([
                ("r1", "[1]"), ("r1", json.dumps({"plan": "x", "n": 1})),
                ("r1", json.dumps({"n": 2})),  # r1: its first row is not a JSON object
                ("w1", json.dumps(wide[0])), ("w1", json.dumps(wide[1])),  # 260 keys merged
                ("s1", json.dumps({"plan": "y"}))])]
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    record = sync_file(path, store=state).record
    assert record is not None
    assert (record["rows_rejected"], record["rows_unchanged"]) == (1, 1)
    assert _billed(service) == (4, 2 + 260 + 1)  # r1 once, w1 twice, s1
    truth = _merged([r for r in rows if r["payload"] != "[1]"])
    _profiles_are(service, truth)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", ["everything", "resumed mid-timestamp", "a partition"])
def test_slices_count_earlier_and_other_rows_as_the_whole_window_does(
        monkeypatch: pytest.MonkeyPatch, name: str, seed: int) -> None:
    """Random tables (`test_duckdb_later`'s): read in slices of 40 rows, a row is its user's
    first read, and its user has other rows, exactly where the window read in one query says
    so."""
    queries = count_reads(monkeypatch, 40)
    engine = _engine()
    _fill(engine, seed, 500, user_is_key=seed >= 4)
    spec = replace(SPEC, merged=True, null_cursor_oldest=seed % 3 == 0,
                   key_columns=("USER",) if seed >= 4 else SPEC.key_columns,
                   superseded_by=("USER", "REGION") if seed % 2 else SPEC.superseded_by)
    window = WINDOWS[name]

    def marked(rows: Any) -> list[tuple[Any, ...]]:
        return [(*r[:-2], r[-2] > 0, r[-1] > 0) for r in rows]

    sliced = marked(tuple(row.values()) for batch in stream_batches(engine, spec, window, 16)
                    for row in batch.to_pylist())
    assert len(queries) > 3  # it was cut
    with engine.connect() as conn:
        whole = marked(conn.execute(extract.build_query(
            spec, extract.resolve_columns(conn, spec), window)))
    assert sliced == whole and len(whole) > 100
    assert any(r[-2] for r in whole) and any(r[-1] and not r[-2] for r in whole)
