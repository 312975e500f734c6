"""The field record as a log and a fold, on SQLite and PostgreSQL state databases: what a
fold leaves is the deltas applied in settle order, nothing logged is lost to a concurrent
fold, and a user changed earlier in the same run is diffed against what that change left."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.diff import field_diff
from engage_sync.diff.stage import UNCHANGED, Differ
from engage_sync.items import Item
from engage_sync.state import field_codec
from engage_sync.state import fields as field_record
from engage_sync.state.fields import FRESH, MERGE
from engage_sync.state.schema import field_log
from engage_sync.state.store import StateStore
from tests.integration.conftest import field_records, logged_deltas

INTEGRATION = "users"


@pytest.fixture
def store(state_both: StateStore) -> StateStore:
    return state_both


def _record(state: StateStore) -> dict[bytes, dict[int, int]]:
    return field_records(state, INTEGRATION)


def _logged(state: StateStore) -> int:
    return logged_deltas(state, INTEGRATION)


def test_a_fold_applies_every_delta_in_settle_order(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random fresh and merge deltas over 40 users, settled in many transactions and folded
    now and then: the record equals a model that applies them one by one."""
    monkeypatch.setattr(field_record, "FOLD_ROWS", 7)  # users straddle the fold's pages
    monkeypatch.setattr(field_record, "LOG_ROWS", 5)  # a settle's deltas in several INSERTs
    rnd = random.Random(12)
    model: dict[bytes, dict[int, int]] = {}
    for settle in range(60):
        deltas = []
        for _ in range(rnd.randint(1, 12)):
            user = f"external_id:u{rnd.randrange(40)}"
            key = field_codec.user_key(user)
            delta = {rnd.randrange(6): rnd.randrange(1 << 63) for _ in range(rnd.randint(1, 3))}
            fresh = key not in model and rnd.random() < 0.8
            model[key] = dict(delta) if fresh else {**model.get(key, {}), **delta}
            deltas.append((user, (FRESH if fresh else MERGE) + field_codec.encode(delta)))
        store.settle("r1", INTEGRATION, [], acked_fields=deltas)
        if settle % 17 == 16:
            assert store.fold_fields(INTEGRATION) > 0
    store.fold_fields(INTEGRATION)
    assert _logged(store) == 0
    assert _record(store) == model


def test_two_fresh_deltas_of_one_user_the_last_wins(store: StateStore) -> None:
    user = "external_id:u1"
    store.settle("r1", INTEGRATION, [], acked_fields=[
        (user, FRESH + field_codec.encode({1: 10, 2: 20})),
        (user, FRESH + field_codec.encode({1: 11, 3: 30})),
        ("external_id:u2", FRESH + field_codec.encode({1: 5}))])
    assert store.fold_fields(INTEGRATION) == 3
    assert _record(store) == {field_codec.user_key(user): {1: 11, 3: 30},
                              field_codec.user_key("external_id:u2"): {1: 5}}


def test_forget_drops_the_record_and_its_log(store: StateStore) -> None:
    store.settle("r1", INTEGRATION, [], acked_fields=[
        ("external_id:u1", FRESH + field_codec.encode({1: 1}))])
    store.fold_fields(INTEGRATION)
    store.settle("r1", INTEGRATION, [], acked_fields=[
        ("external_id:u2", FRESH + field_codec.encode({1: 1}))])
    assert store.forget_fields(INTEGRATION) == 2
    assert _record(store) == {} and _logged(store) == 0


def test_a_fold_waits_for_a_settle_in_progress_and_folds_it(store: StateStore) -> None:
    """PostgreSQL: a settle logging fields holds a shared lock until it commits, so a fold
    started meanwhile neither misses its delta nor deletes it unfolded. (SQLite: one writer.)"""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite admits one writer at a time")
    key = field_codec.user_key("external_id:u1")
    with store.engine.connect() as conn:
        tx = conn.begin()
        field_record.log(conn, INTEGRATION, [("external_id:u1",
                                              FRESH + field_codec.encode({1: 1}))])
        folded: list[int] = []
        fold = threading.Thread(target=lambda: folded.append(store.fold_fields(INTEGRATION)))
        fold.start()
        time.sleep(0.5)
        assert fold.is_alive(), "the fold did not wait for the settle"
        tx.commit()
    fold.join(10)
    assert folded == [1]
    assert _record(store) == {key: {1: 1}} and _logged(store) == 0


def _item(seq: int, plan: Any) -> Item:
    blob = json.dumps({"external_id": "u1", "plan": plan}).encode()
    return Item(seq, "u1", "external_id:u1", "attributes", blob, (), 1)


def test_a_user_changed_earlier_in_the_run_is_diffed_against_that_change(
    store: StateStore
) -> None:
    """u1's record says free; this run sends gold and the service acknowledges it (logged, not
    folded); a later row sets free again: it must be sent, though the folded record says free."""
    store.settle("r0", INTEGRATION, [], acked_fields=[
        ("external_id:u1", FRESH + field_codec.encode(field_diff.diff(
            {"external_id": "u1", "plan": "free"}, "external_id", None).delta))])
    differ = Differ(INTEGRATION, store)
    differ.open()
    first: list[Any] = [_item(0, "gold")]
    differ.apply(first)
    store.settle("r1", INTEGRATION, [], acked_fields=[(first[0].user, first[0].fields)])
    differ.release(first)
    assert _logged(store) == 1
    second: list[Any] = [_item(1, "free")]
    differ.apply(second)
    assert second[0] is not UNCHANGED and json.loads(second[0].blob)["plan"] == "free"
    assert _logged(store) == 0  # the lookup found u1 in the filter: the log was folded first
    differ.release(second)
    third: list[Any] = [_item(2, "free")]
    differ.apply(third)  # nothing acknowledged for the second: gold is what the record says
    assert third[0] is not UNCHANGED


def test_the_log_is_folded_at_the_end_of_a_run_sized_batch(store: StateStore) -> None:
    """2,000 fresh users settled in 20 transactions, then one fold: the log is empty and the
    record holds each user once."""
    for t in range(20):
        store.settle("r1", INTEGRATION, [], acked_fields=[
            (f"external_id:u{t * 100 + k}", FRESH + field_codec.encode({1: t * 100 + k}))
            for k in range(100)])
    with store.engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(field_log)) == 2000
    assert store.fold_fields(INTEGRATION) == 2000
    record = _record(store)
    assert len(record) == 2000
    assert record[field_codec.user_key("external_id:u1234")] == {1: 1234}


def test_a_large_fold_refreshes_the_planners_statistics(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: a table filled by one fold has no statistics until autovacuum comes, and
    the lookups scan it whole; a large fold analyzes it."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite plans the lookup by its primary key without statistics")
    monkeypatch.setattr(field_record, "ANALYZE_AFTER", 500)
    store.settle("r1", INTEGRATION, [], acked_fields=[
        (f"external_id:u{k}", FRESH + field_codec.encode({1: k})) for k in range(600)])
    store.fold_fields(INTEGRATION)
    with store.engine.connect() as conn:
        analyzed = conn.exec_driver_sql(
            "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'engage_fields' "
            "AND schemaname = current_schema()").scalar_one()
    assert analyzed is not None


def test_a_first_run_looks_nothing_up_and_sends_every_item_whole(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that opens on an empty record looks nothing up: a user's second item is sent
    whole too (both logged fresh) and the fold at the end keeps the last one acknowledged.
    The next run looks the record up and sends nothing for an unchanged user."""
    lookups: list[int] = []
    real = store.field_digests
    monkeypatch.setattr(store, "field_digests",
                        lambda name, keys: lookups.append(len(keys)) or real(name, keys))
    differ = Differ(INTEGRATION, store)
    differ.open()
    items: list[Any] = [_item(0, "gold")]
    differ.apply(items)
    store.settle("r1", INTEGRATION, [], acked_fields=[(items[0].user, items[0].fields)])
    differ.release(items)
    later: list[Any] = [_item(1, "free")]
    differ.apply(later)
    assert lookups == [] and differ.pending == {}
    assert [i.fields[:1] for i in items + later] == [FRESH, FRESH]
    assert json.loads(later[0].blob)["plan"] == "free"
    store.settle("r1", INTEGRATION, [], acked_fields=[(later[0].user, later[0].fields)])
    differ.release(later)
    differ.close()
    assert _logged(store) == 0 and not differ.blank

    again = Differ(INTEGRATION, store)
    again.open()
    unchanged: list[Any] = [_item(2, "free")]
    again.apply(unchanged)
    assert lookups == [1] and unchanged == [UNCHANGED]


def test_a_full_filter_folds_the_log(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a non-empty record, the filter of logged users is bounded: once full, the log is
    folded and the filter emptied."""
    monkeypatch.setattr("engage_sync.diff.logged_users.CAPACITY", 1)
    store.settle("r0", INTEGRATION, [], acked_fields=[
        ("external_id:u0", FRESH + field_codec.encode({1: 1}))])
    differ = Differ(INTEGRATION, store)
    differ.open()
    assert not differ.blank
    items: list[Any] = [_item(0, "gold")]
    differ.apply(items)
    store.settle("r1", INTEGRATION, [], acked_fields=[(items[0].user, items[0].fields)])
    assert _logged(store) == 1
    differ.release(items)
    assert _logged(store) == 0 and differ.logged.count == 0


def _resync_u1(state: StateStore) -> None:
    """A full resync of two rows of u1 (plan gold, then free), settled and folded."""
    differ = Differ(INTEGRATION, state, refresh=True)
    differ.open()
    items: list[Any] = [_item(0, "gold"), _item(1, "free")]
    differ.apply(items)
    assert differ.pending == {} and all(i.fields[:1] == MERGE for i in items)
    for item in items:
        state.settle("r1", INTEGRATION, [], acked_fields=[(item.user, item.fields)])
    differ.release(items)
    differ.close()
    assert differ.pending == {} and _logged(state) == 0


@pytest.mark.parametrize("empty", [False, True])
def test_a_full_resync_keeps_no_pending_map_and_merges_at_the_fold(
    store: StateStore, empty: bool
) -> None:
    """A full resync sends every item whole with no lookup, keeps nothing pending whatever
    its rows (on an empty record too), and its deltas merge on top of the record: an
    attribute its objects do not carry keeps its digest."""
    store.settle("r0", INTEGRATION, [], acked_fields=[
        ("external_id:u1", FRESH + field_codec.encode({7: 70}))])
    if empty:
        store.forget_fields(INTEGRATION)
    _resync_u1(store)
    plan = {field_diff.slot_of("plan"): field_diff.value_digest("plan", "free")}
    kept = {} if empty else {7: 70}
    assert _record(store) == {field_codec.user_key("external_id:u1"): {**kept, **plan}}
