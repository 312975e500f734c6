"""The field-level diff end to end on DuckDB and PostgreSQL, counted at the sandbox."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.cli.main import main
from engage_sync.config.run_options import RunOptions, run_options
from engage_sync.diff import field_diff
from engage_sync.diff.helper import ENV, FieldHelper
from engage_sync.diff.stage import UNCHANGED, Differ
from engage_sync.items import Item
from engage_sync.state import field_codec
from engage_sync.state.fields import FRESH
from engage_sync.state.schema import ADDED_COLUMNS, field_log, fields, runs
from engage_sync.state.store import StateStore
from engage_sync.status.record import page, record
from tests.integration.conftest import (
    T0,
    Service,
    Warehouse,
    kill_during_request,
    resume_cli,
    table_integration,
)

ROWS = 200
ATTRIBUTES = ("plan", "n", "city")


def _rows(n: int = ROWS, **changed: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        uid = f"u{i:05d}"
        payload = {"plan": "free", "n": i, "city": "Lyon", **changed.get(uid, {})}
        out.append({"updated_at": T0 + timedelta(seconds=i), "external_id": uid,
                    "payload": json.dumps(payload)})
    return out


def _touch(wh: Warehouse, hours: int, where: str = "1 = 1", payload: str | None = None) -> None:
    """Move UPDATED_AT of the matching rows (and set their payload, if given)."""
    moved = f"updated_at + INTERVAL '{hours} hours'"
    sets = f"updated_at = {moved}" + (", payload = :payload" if payload is not None else "")
    wh.execute(f"UPDATE users_sync SET {sets} WHERE {where}",
               **({"payload": payload} if payload is not None else {}))


def _run(path: Path, state: StateStore, mode: str = "incremental") -> dict[str, Any]:
    options = run_options(mode, None, None, False, False)  # type: ignore[arg-type]
    record = sync_file(path, store=state, options=options).record
    assert record is not None
    return record


def _points(service: Service) -> int:
    return int(service.counters()["data_points"])


@pytest.fixture
def users(warehouse: Warehouse, service: Service, tmp_path: Path) -> Path:
    # two batches of 100: with a helper after 50 objects, the first batch is digested in the
    # run and the second by the helper
    return table_integration(warehouse, service, tmp_path, "attributes", _rows(),
                             extract_batch_rows=100)


@pytest.fixture(params=["off", "50"], ids=["in-process", "helper-after-50"])
def first_run_helper(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A first run digests every object itself, or its first 50 and then hands the rest to
    a helper process (`field_helper`): both must leave the same record."""
    monkeypatch.setenv(ENV, request.param)
    return str(request.param)


def test_rerun_and_touched_rows_bill_nothing(
    users: Path, warehouse: Warehouse, service: Service, state: StateStore,
    first_run_helper: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[FieldHelper] = []

    def helper(*args: Any) -> FieldHelper:
        started.append(FieldHelper(*args))
        return started[-1]

    monkeypatch.setattr("engage_sync.diff.stage.FieldHelper", helper)
    first = _run(users, state)
    assert len(started) == (first_run_helper != "off")  # the first run only
    assert _points(service) == ROWS * len(ATTRIBUTES)
    assert (first["data_points_sent"], first["data_points_saved"]) == (ROWS * 3, 0)
    requests = len(service.requests())

    again = _run(users, state)  # nothing changed, nothing moved
    _touch(warehouse, 1)  # UPDATED_AT moved on every row, no value changed
    touched = _run(users, state)
    assert len(service.requests()) == requests and _points(service) == ROWS * 3
    assert again["data_points_sent"] == touched["data_points_sent"] == 0
    assert touched["rows_unchanged"] == ROWS and touched["data_points_saved"] == ROWS * 3
    assert touched["job_status"] == "success"
    # the cursor moved over the unchanged rows: the next run does not read them again
    assert _run(users, state)["rows_unchanged"] == 0


@pytest.mark.usefixtures("first_run_helper")
def test_one_changed_attribute_bills_one_point_and_null_is_sent_once(
    users: Path, warehouse: Warehouse, service: Service, state: StateStore
) -> None:
    _run(users, state)
    before = _points(service)
    _touch(warehouse, 1, "external_id = 'u00007'",
           json.dumps({"plan": "gold", "n": 7, "city": "Lyon"}))
    changed = _run(users, state)
    assert _points(service) == before + 1
    assert service.requests()[-1]["body"]["attributes"] == [
        {"external_id": "u00007", "plan": "gold"}]
    assert (changed["data_points_sent"], changed["data_points_saved"]) == (1, 2)
    assert service.counters()["data_points_by_key"]["attributes"]["plan"] == ROWS + 1

    nulled = json.dumps({"plan": None, "n": 7, "city": "Lyon"})
    _touch(warehouse, 2, "external_id = 'u00007'", nulled)
    _run(users, state)
    assert service.requests()[-1]["body"]["attributes"] == [
        {"external_id": "u00007", "plan": None}]
    assert "plan" not in service.profile("u00007")["attributes"]  # type: ignore[index]
    _touch(warehouse, 3, "external_id = 'u00007'", nulled)
    still = _run(users, state)
    assert _points(service) == before + 2 and still["rows_unchanged"] == 1


@pytest.mark.usefixtures("first_run_helper")
def test_full_resync_sent_whole_sends_everything_then_incremental_bills_nothing(
    users: Path, warehouse: Warehouse, service: Service, state: StateStore
) -> None:
    _run(users, state)
    diffed = _run(users, state, "full_resync")  # diffs by default: nothing changed
    assert _points(service) == ROWS * 3 and diffed["data_points_saved"] == ROWS * 3
    options = run_options("full_resync", None, None, False, False, send_whole=True)
    full = sync_file(users, store=state, options=options).record
    assert full is not None
    assert _points(service) == 2 * ROWS * 3 and full["data_points_sent"] == ROWS * 3
    _touch(warehouse, 1)
    after = _run(users, state)
    assert _points(service) == 2 * ROWS * 3 and after["data_points_saved"] == ROWS * 3


def test_diff_off_sends_every_row_whole(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    path = table_integration(warehouse, service, tmp_path, "attributes", _rows(), diff="off")
    _run(path, state)
    _touch(warehouse, 1)
    touched = _run(path, state)
    assert _points(service) == 2 * ROWS * 3
    assert (touched["data_points_sent"], touched["rows_unchanged"]) == (ROWS * 3, 0)


def test_dry_run_shows_what_the_diff_would_send(
    users: Path, warehouse: Warehouse, service: Service, state: StateStore
) -> None:
    _run(users, state)
    _touch(warehouse, 1)
    _touch(warehouse, 1, "external_id = 'u00003'",
           json.dumps({"plan": "gold", "n": 3, "city": "Nice"}))
    dry = sync_file(users, store=state, options=RunOptions(dry_run=True)).dry_run
    assert dry is not None
    summary = dry.summary("users")
    assert (summary["rows"], summary["rows_unchanged"]) == (1, ROWS - 1)
    assert (summary["data_points_sent"], summary["data_points_saved"]) == (2, ROWS * 3 - 2)
    assert json.loads(summary["sample"][0]) == {"external_id": "u00003", "plan": "gold",
                                                "city": "Nice"}


def _recorded(state: StateStore) -> dict[bytes, dict[int, int]]:
    """The whole record: every integration's log folded, then read."""
    with state.engine.connect() as conn:
        logged = conn.execute(sa.select(field_log.c.integration).distinct()).scalars().all()
    for name in logged:
        state.fold_fields(name)
    with state.engine.connect() as conn:
        rows = conn.execute(fields.select()).all()
    return {bytes(r.user_key): field_codec.decode(bytes(r.digests)) for r in rows}


def _processed(service: Service) -> dict[bytes, dict[int, int]]:
    """What the sandbox holds, as the digests the record would hold for it."""
    out = {}
    for profile in service.profiles():
        attrs = profile["attributes"]
        out[field_codec.user_key(f"external_id:{profile['external_id']}")] = {
            field_diff.slot_of(a): field_diff.value_digest(a, attrs.get(a)) for a in ATTRIBUTES}
    return out


def _wait_for_helpers(seconds: float = 30) -> None:
    """Until no field helper process runs on this machine."""
    deadline = time.monotonic() + seconds
    while any(b"engage_sync.diff.helper" in p.read_bytes()
              for p in Path("/proc").glob("[0-9]*/cmdline") if _readable(p)):
        assert time.monotonic() < deadline, "a field helper process never exited"
        time.sleep(0.1)


def _readable(path: Path) -> bool:
    try:
        path.read_bytes()
    except OSError:  # the process just exited
        return False
    return True


@pytest.mark.parametrize("helper", ["off", "5000"], ids=["in-process", "helper-after-5000"])
def test_sigkill_then_resume_records_only_what_the_sandbox_processed(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path, helper: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 267 requests. Settlements are saved 32 at a time, and at most 72 requests are handed to
    # the sender unsettled (8 in flight + 2 groups): when request 250 is sent, at least 178
    # were collected, so at least five groups were recorded before the kill. With a helper
    # process after 5,000 objects, the run logs the first 5,000 itself, the helper the rest.
    monkeypatch.setenv(ENV, helper)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where a helper keeps its file
    rows = _rows(20_000)
    path = table_integration(warehouse, service, tmp_path, "attributes", rows,
                             extract_batch_rows=500)
    warehouse.engine.dispose()  # DuckDB: one process at a time may open the file
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    state = open_state(state_url)
    kill_during_request(path, service, sandbox_key, state_url, nth=250)
    _wait_for_helpers()  # an orphaned helper finds its input ended: it records nothing

    processed, recorded = _processed(service), _recorded(state)
    assert recorded, "the killed run recorded nothing: the kill came too early to test"
    assert set(recorded) <= set(processed)
    for user, digests in recorded.items():  # a recorded field is one the sandbox holds
        assert digests == processed[user]
    assert not list(tmp_path.glob("engage-fields-*"))

    resume_cli(path, state_url, sandbox_key)
    final = {f"u{i:05d}": json.loads(r["payload"]) for i, r in enumerate(rows)}
    for profile in service.profiles():
        assert profile["attributes"] == final[profile["external_id"]]
    assert len(service.profiles()) == len(rows)
    after, held = _recorded(state), _processed(service)
    if helper == "off":  # logged in the settle's transaction: the record is whole
        assert after == held
        return
    # what the killed attempt handed its helper is not recorded (sent whole next time); the
    # rest is recorded exactly as the sandbox holds it
    assert len(recorded) == 5_000 and set(recorded) <= set(after)
    assert set(after) <= set(held) and all(after[user] == held[user] for user in after)
    assert len(after) < len(rows)


def _item(seq: int, plan: Any) -> Item:
    blob = json.dumps({"external_id": "u1", "plan": plan}).encode()
    return Item(seq, "u1", "external_id:u1", "attributes", blob, (), 1)


def test_a_value_changed_back_before_the_first_change_settled_is_sent(state: StateStore) -> None:
    """Row 1 sets plan to gold, row 2 (a later batch, row 1 still in flight) sets it back: row
    2 is diffed against what row 1 will leave at the service, not against the stored record."""
    state.settle("r", "users", [], acked_fields=[
        ("external_id:u1", FRESH + field_codec.encode(field_diff.diff(
            {"external_id": "u1", "plan": "free"}, "external_id", None).delta))])
    differ = Differ("users", state)
    differ.open()  # as a run does: the settled record is folded
    first: list[Any] = [_item(0, "gold")]
    differ.apply(first)
    second: list[Any] = [_item(1, "free")]
    differ.apply(second)
    assert second[0] is not None and json.loads(second[0].blob)["plan"] == "free"
    differ.release([first[0], second[0]])
    assert differ.pending == {}
    third: list[Any] = [_item(2, "free")]
    differ.apply(third)  # nothing was recorded (no ack): the stored record says free
    assert third == [UNCHANGED]


def test_status_cli_and_server_show_the_points_the_sandbox_counted(
    users: Path, warehouse: Warehouse, service: Service, tmp_path: Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'status.db'}"
    state = open_state(url)
    _run(users, state)
    _touch(warehouse, 1, "external_id < 'u00010'",
           json.dumps({"plan": "pro", "n": -1, "city": "Lyon"}))
    _run(users, state)
    capsys.readouterr()
    assert main(["status", "users", "--state-url", url]) == 0
    shown = json.loads(capsys.readouterr().out)["results"]
    served = page(state, "users", None, extended=False).results  # what status-server answers
    billed = service.counters()["data_points_by_key"]["attributes"]
    assert [r["data_points_sent"] for r in shown] == [20, ROWS * 3]
    assert [r["data_points_sent"] for r in served] == [20, ROWS * 3]
    assert sum(r["data_points_sent"] for r in shown) == sum(billed.values())
    assert [r["data_points_saved"] for r in served] == [10, 0]


def test_forget_makes_the_next_run_send_every_field(
    users: Path, warehouse: Warehouse, service: Service, tmp_path: Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'forget.db'}"
    state = open_state(url)
    _run(users, state)
    assert main(["forget", "users", "--state-url", url]) == 0
    assert f"{ROWS} users" in capsys.readouterr().out
    _touch(warehouse, 1)
    again = _run(users, state)
    assert again["data_points_sent"] == ROWS * 3 and _points(service) == 2 * ROWS * 3


def test_an_item_the_service_refused_is_not_recorded_nor_billed(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path
) -> None:
    rows = _rows(50)
    rows[7]["external_id"] = "undefined"  # the sandbox refuses it (an item error in a 201)
    path = table_integration(warehouse, service, tmp_path, "attributes", rows)
    first = _run(path, state)
    assert first["rows_failed_with_errors"] == 1
    assert first["data_points_sent"] == 49 * 3 == _points(service)
    _touch(warehouse, 1)
    touched = _run(path, state)
    assert touched["rows_unchanged"] == 49  # the refused row was not recorded: sent again
    assert service.requests()[-1]["body"]["attributes"] == [
        {"external_id": "undefined", **json.loads(rows[7]["payload"])}]
    assert touched["data_points_sent"] == 0 and _points(service) == 49 * 3


def test_a_state_database_made_before_the_diff_gets_its_columns(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    old = sa.MetaData()
    sa.Table(runs.name, old, *(sa.Column(c.name, c.type, primary_key=c.primary_key)
                               for c in runs.columns if c.name not in ADDED_COLUMNS))
    old.create_all(engine)
    store = StateStore(engine)
    run_id = store.open_run("users", "incremental", None, None)
    store.add_saved_counts(run_id, 2, 6)
    store.finish_run(run_id, "success")
    shown = record(store.run(run_id))
    assert (shown["rows_unchanged"], shown["data_points_saved"]) == (2, 6)
