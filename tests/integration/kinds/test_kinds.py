"""The subscription and identity kinds end to end, on DuckDB and PostgreSQL, against the
sandbox over loopback: the effect is visible in the control plane, the request bodies keep the
limits, every row is accounted for, the documented rejections are recorded, a run killed with
SIGKILL resumes with nothing lost, and two subscription integrations share one rate budget."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engage_sync.adapters.wiring import open_state, sync_file
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.state.store import StateStore
from tests.integration.conftest import (
    SUBSCRIPTION_LIMIT,
    T0,
    Service,
    Warehouse,
    kill_during_request,
    resume_cli,
    seed_profiles,
    write_integration,
)

V2 = "/v2/subscription/status/set"
V1 = "/subscription/status/set"


def kind_body(wh: Warehouse | str, svc: Service, kind: str, table: str,
              section: dict[str, Any], **extra: Any) -> dict[str, Any]:
    service = {"base_url": svc.base_url, "retry_deadline_seconds": 60,
               **extra.pop("service", {})}
    return {"kind": kind, "warehouse": {"url": wh if isinstance(wh, str) else wh.url},
            "source": {"table": table}, kind: section, "service": service, **extra}


def alias_profile(svc: Service, name: str, label: str) -> dict[str, Any] | None:
    r = svc.control.get("/profiles", params={"alias_name": name, "alias_label": label})
    return None if r.status_code == 404 else dict(r.json())


def bodies(svc: Service, path: str, skip: int = 0) -> list[dict[str, Any]]:
    """Bodies of the requests to `path` after the first `skip`; all of them were accepted."""
    entries = svc.requests(path)[skip:]
    assert all(e["status"] is not None and e["status"] < 400 for e in entries), \
        [e["status"] for e in entries]
    return [json.loads(e["body"]) if isinstance(e.get("body"), str) else e["body"]
            for e in entries]


def rejects(state: StateStore, name: str) -> dict[str, str]:
    return {e["row_key"]: e["reason"] for e in state.errors(name, limit=1000)
            if e["kind"] == "rejected"}


def accounted(record: dict[str, Any] | None, read: int, rejected: int) -> None:
    assert record is not None
    assert record["rows_read"] == read
    assert record["rows_rejected"] == rejected
    assert record["rows_synced"] == read - rejected
    assert record["rows_in_doubt"] == 0
    assert record["rows_failed_with_errors"] == rejected


# --- subscriptions ---------------------------------------------------------------------------


def _subscription_rows(n: int) -> list[dict[str, Any]]:
    """n rows over 60 users (20 by external id, 20 by email, 20 by phone) and two groups; a
    user's state flips on each pass, so only row order yields the final state."""
    rows = []
    for k in range(n):
        i = k % 60
        ext = f"s{i:03d}" if i < 20 else None
        email = f"s{i:03d}@x.io" if 20 <= i < 40 else None
        phone = f"+1555000{i:04d}" if i >= 40 else None
        rows.append({"row_id": k, "updated_at": T0 + timedelta(seconds=k // 7),
                     "external_id": ext, "email": email, "phone": phone,
                     "group_id": "g1" if (k // 60) % 2 == 0 else "g2",
                     "state": "subscribed" if (k // 120) % 2 == 0 else "unsubscribed"})
    return rows


def _subscription_profiles() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(60):
        obj: dict[str, Any] = {"external_id": f"s{i:03d}"}
        if 20 <= i < 40:
            obj["email"] = f"s{i:03d}@x.io"
        if i >= 40:
            obj["phone"] = f"+1555000{i:04d}"
        out.append(obj)
    return out


def _subscriptions_table(wh: Warehouse, rows: list[dict[str, Any]]) -> None:
    wh.create("subs_sync", [("row_id", sa.Integer()), ("updated_at", sa.DateTime()),
                            ("external_id", sa.String()), ("email", sa.String()),
                            ("phone", sa.String()), ("group_id", sa.String()),
                            ("state", sa.String())])
    wh.insert("subs_sync", rows)


SUBS_SECTION = {"user": {"external_id": "EXTERNAL_ID", "email": "EMAIL", "phone": "PHONE"},
                "group_column": "GROUP_ID", "state_column": "STATE"}


@pytest.mark.parametrize("endpoint", ["v2", "v1"])
def test_subscriptions_set_states_in_row_order_within_limits(
    warehouse: Warehouse, service: Service, state: StateStore, sandbox_key: str,
    tmp_path: Path, endpoint: str,
) -> None:
    seed_profiles(service, sandbox_key, _subscription_profiles())
    rows = _subscription_rows(400)
    bad = [{**rows[0], "row_id": 1000, "phone": "5550001", "external_id": None},
           {**rows[0], "row_id": 1001, "state": "maybe"},
           {**rows[0], "row_id": 1002, "external_id": None}]
    _subscriptions_table(warehouse, rows + bad)
    path = write_integration(tmp_path, "subs", kind_body(
        warehouse, service, "subscriptions", "subs_sync", {**SUBS_SECTION, "endpoint": endpoint},
        row_key=["ROW_ID"]))
    accounted(sync_file(path, store=state).record, 403, 3)
    assert rejects(state, "subs") == {
        "1000": "PHONE is not an E.164 phone number ('+' and 2 to 15 digits)",
        "1001": "STATE must be 'subscribed' or 'unsubscribed'",
        "1002": "no identifier: EXTERNAL_ID, EMAIL, PHONE are all missing (NULL)"}

    final = {(f"s{r['row_id'] % 60:03d}", r["group_id"]): r["state"] for r in rows}
    for (user, group), expected in final.items():
        profile = service.profile(user)
        assert profile is not None and profile["subscription_groups"][group] == expected

    path_used = V2 if endpoint == "v2" else V1
    sent = bodies(service, path_used)
    assert not service.requests(V1 if endpoint == "v2" else V2)
    ids = 0
    for body in sent:
        objects = body["subscription_groups"] if endpoint == "v2" else [body]
        total = 0
        for obj in objects:
            lists = [k for k in ("external_ids", "emails", "phones", "external_id", "email",
                                 "phone") if k in obj]
            assert len(lists) == 1 and 1 <= len(obj[lists[0]]) <= 50
            total += len(obj[lists[0]])
        assert total <= 50
        ids += total
    assert ids == 400  # every valid row sent once
    if endpoint == "v2":
        assert len(sent) == math.ceil(400 / 50)


def test_subscription_groups_inside_users_track_attributes(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    warehouse.create("prefs", [("updated_at", sa.DateTime()), ("user_id", sa.String()),
                               ("plan", sa.String()), ("news", sa.String())])
    warehouse.insert("prefs", [
        {"updated_at": T0, "user_id": "p1", "plan": "pro", "news": "subscribed"},
        {"updated_at": T0, "user_id": "p2", "plan": "free", "news": None},
        {"updated_at": T0, "user_id": "p3", "plan": "free", "news": "yes please"}])
    path = write_integration(tmp_path, "prefs", _track_groups_body(warehouse, service))
    accounted(sync_file(path, store=state).record, 3, 1)
    p1, p2 = service.profile("p1"), service.profile("p2")
    assert p1 is not None and p1["subscription_groups"] == {"sg-news": "subscribed"}
    assert p2 is not None and p2["subscription_groups"] == {}
    assert service.profile("p3") is None
    assert rejects(state, "prefs") == {"p3": "NEWS must be 'subscribed' or 'unsubscribed'"}


def _track_groups_body(wh: Warehouse, svc: Service) -> dict[str, Any]:
    return {"kind": "attributes", "warehouse": {"url": wh.url}, "source": {"table": "prefs"},
            "mapping": {"identifier": {"external_id": "USER_ID"}, "attributes": {"PLAN": "plan"},
                        "subscription_groups": [{"group_id": "sg-news",
                                                 "state_column": "NEWS"}]},
            "service": {"base_url": svc.base_url}}


# --- deletes ---------------------------------------------------------------------------------


def test_deletes_remove_exactly_the_named_users(
    warehouse: Warehouse, service: Service, state: StateStore, sandbox_key: str,
    tmp_path: Path,
) -> None:
    seed_profiles(service, sandbox_key, [
        *({"external_id": f"d{i:03d}"} for i in range(120)),
        *({"user_alias": {"alias_name": f"a{i}", "alias_label": "crm"},
           "_update_existing_only": False} for i in range(8)),
        *({"external_id": f"m{i}", "email": f"m{i}@x.io"} for i in range(6)),
    ])
    rows: list[dict[str, Any]] = []

    def row(**ids: Any) -> None:
        rows.append({"row_id": len(rows), "updated_at": T0 + timedelta(seconds=len(rows) // 10),
                     "external_id": None, "alias_name": None, "alias_label": None,
                     "email": None, **ids})

    for i in range(0, 110):  # d000..d109; d110..d119 stay
        row(external_id=f"d{i:03d}")
        if i in (30, 70):
            for k in range(i // 30 * 2, i // 30 * 2 + 2):
                row(alias_name=f"a{k}", alias_label="crm")  # a2, a3, a4, a5
        if i == 90:
            row(email="m0@x.io")
            row(email="M1@X.IO")
    row()  # no identifier
    row(external_id="d119", email="m2@x.io")  # two identifiers
    row(alias_name="a7", alias_label=None)
    warehouse.create("deletes_sync", [("row_id", sa.Integer()), ("updated_at", sa.DateTime()),
                                      ("external_id", sa.String()), ("alias_name", sa.String()),
                                      ("alias_label", sa.String()), ("email", sa.String())])
    warehouse.insert("deletes_sync", rows)
    path = write_integration(tmp_path, "deletes", kind_body(
        warehouse, service, "deletes", "deletes_sync",
        {"identifiers": ["external_id", "user_alias", "email"],
         "prioritization": ["identified", "most_recently_updated"]},
        row_key=["ROW_ID"]))
    accounted(sync_file(path, store=state).record, len(rows), 3)
    assert set(rejects(state, "deletes").values()) == {
        "no identifier: EXTERNAL_ID, ALIAS_NAME, ALIAS_LABEL, EMAIL are all missing (NULL)",
        "more than one identifier given (EXTERNAL_ID, EMAIL); give exactly one per row",
        "ALIAS_LABEL is missing (NULL)"}

    left = {p["external_id"] or p["user_aliases"][0]["alias_name"] for p in service.profiles()}
    assert left == {*(f"d{i:03d}" for i in range(110, 120)), "a0", "a1", "a6", "a7",
                    "m2", "m3", "m4", "m5"}
    sent = bodies(service, "/users/delete")
    for body in sent:
        ((_kind, values),) = body.items()  # one identifier kind per request
        assert 1 <= len(values) <= 50
    assert sum(len(v) for b in sent for v in b.values()) == len(rows) - 3
    # cut when the kind changes: ids 0-30, aliases, ids 31-70, aliases, ids 71-90, emails,
    # ids 91-109 (sent up to four at a time, so the log holds them in arrival order)
    assert Counter(next(iter(b)) for b in sent) == {
        "external_ids": 4, "user_aliases": 2, "email_addresses": 1}


# --- identify --------------------------------------------------------------------------------


def test_identify_attaches_or_merges_alias_only_users(
    warehouse: Warehouse, service: Service, state: StateStore, sandbox_key: str,
    tmp_path: Path,
) -> None:
    seed_profiles(service, sandbox_key, [
        *({"user_alias": {"alias_name": f"anon{i}", "alias_label": "web"},
           "_update_existing_only": False, "last_page": f"/p{i}"} for i in range(60)),
        *({"external_id": f"known{i}", "plan": "pro"} for i in range(50, 60)),
    ])
    rows = [{"updated_at": T0 + timedelta(seconds=i // 25), "alias_name": f"anon{i}",
             "alias_label": "web", "external_id": f"new{i}" if i < 50 else f"known{i}"}
            for i in range(60)]
    rows.append({"updated_at": T0, "alias_name": "anon-x", "alias_label": "web",
                 "external_id": None})
    warehouse.create("identify_sync", [("updated_at", sa.DateTime()),
                                       ("alias_name", sa.String()),
                                       ("alias_label", sa.String()),
                                       ("external_id", sa.String())])
    warehouse.insert("identify_sync", rows)
    path = write_integration(tmp_path, "identify", kind_body(
        warehouse, service, "identify", "identify_sync",
        {"alias_name": "ALIAS_NAME", "alias_label": "ALIAS_LABEL"}))
    accounted(sync_file(path, store=state).record, 61, 1)
    assert rejects(state, "identify") == {"web|anon-x": "EXTERNAL_ID is missing (NULL)"}
    for i in range(60):
        profile = alias_profile(service, f"anon{i}", "web")
        assert profile is not None
        assert profile["external_id"] == (f"new{i}" if i < 50 else f"known{i}")
        assert profile["attributes"]["last_page"] == f"/p{i}"
        if i >= 50:  # merged into the identified user: its own fields kept, the alias's added
            assert profile["attributes"]["plan"] == "pro"
    assert len(service.profiles()) == 60
    sent = bodies(service, "/users/identify")
    assert sorted(len(b["aliases_to_identify"]) for b in sent) == [10, 50]


# --- merges ----------------------------------------------------------------------------------


def test_merges_follow_the_field_rules_and_reject_rows_the_service_would_refuse(
    warehouse: Warehouse, service: Service, state: StateStore, sandbox_key: str,
    tmp_path: Path,
) -> None:
    seed_profiles(service, sandbox_key, [
        *({"external_id": f"old{i}", "city": f"c{i}", "plan": "old-plan"} for i in range(55)),
        *({"external_id": f"keep{i}", "plan": "pro"} for i in range(55)),
        {"user_alias": {"alias_name": "guest", "alias_label": "pos"},
         "_update_existing_only": False, "loyalty": "gold"},
        {"external_id": "phone-holder", "phone": "+4915112345678", "tier": 2},
    ])
    rows = [{"row_id": i, "updated_at": T0, "merge_id": f"old{i}", "merge_alias": None,
             "merge_phone": None, "keep_id": f"keep{i}"} for i in range(55)]
    label = {"merge_label": None}
    rows += [
        {"row_id": 100, "updated_at": T0, "merge_id": None, "merge_alias": "guest",
         "merge_phone": None, "keep_id": "keep0", "merge_label": "pos"},
        {"row_id": 101, "updated_at": T0, "merge_id": None, "merge_alias": None,
         "merge_phone": "+4915112345678", "keep_id": "keep1"},
        {"row_id": 102, "updated_at": T0, "merge_id": "keep2", "merge_alias": None,
         "merge_phone": None, "keep_id": "keep2"},
        {"row_id": 103, "updated_at": T0, "merge_id": None, "merge_alias": None,
         "merge_phone": "0151 1234", "keep_id": "keep3"},
        {"row_id": 104, "updated_at": T0, "merge_id": "old1", "merge_alias": None,
         "merge_phone": None, "keep_id": None},
    ]
    rows = [{**label, **r} for r in rows]
    warehouse.create("merges_sync", [("row_id", sa.Integer()), ("updated_at", sa.DateTime()),
                                     ("merge_id", sa.String()), ("merge_alias", sa.String()),
                                     ("merge_phone", sa.String()), ("keep_id", sa.String()),
                                     ("merge_label", sa.String())])
    warehouse.insert("merges_sync", rows)
    path = write_integration(tmp_path, "merges", kind_body(
        warehouse, service, "merges", "merges_sync",
        {"merge": {"external_id": "MERGE_ID", "alias_name": "MERGE_ALIAS",
                   "alias_label": "MERGE_LABEL", "phone": "MERGE_PHONE",
                   "prioritization": ["most_recently_updated"]},
         "keep": {"external_id": "KEEP_ID"}},
        row_key=["ROW_ID"]))
    accounted(sync_file(path, store=state).record, 60, 3)
    assert rejects(state, "merges") == {
        "102": "identifier_to_merge and identifier_to_keep name the same user",
        "103": "identifier_to_merge: MERGE_PHONE is not an E.164 phone number "
               "('+' and 2 to 15 digits)",
        "104": "identifier_to_keep: no identifier: KEEP_ID is missing (NULL)"}
    for i in range(55):
        assert service.profile(f"old{i}") is None
        kept = service.profile(f"keep{i}")
        assert kept is not None
        assert kept["attributes"]["plan"] == "pro"  # the kept profile's own value stays
        assert kept["attributes"]["city"] == f"c{i}"  # a field it lacked is copied
    keep0, keep1 = service.profile("keep0"), service.profile("keep1")
    assert keep0 is not None and keep0["attributes"]["loyalty"] == "gold"
    assert {"alias_name": "guest", "alias_label": "pos"} in keep0["user_aliases"]
    assert keep1 is not None and keep1["phone"] == "+4915112345678"
    assert service.profile("phone-holder") is None
    sent = bodies(service, "/users/merge")  # no 400: none of the four messages happened
    assert all(1 <= len(b["merge_updates"]) <= 50 for b in sent)
    assert sum(len(b["merge_updates"]) for b in sent) == 57
    for body in sent:
        users = [json.dumps(side, sort_keys=True) for u in body["merge_updates"]
                 for side in u.values()]
        assert max(Counter(users).values()) == 1  # no user twice in one request


# --- alias renames ---------------------------------------------------------------------------


def test_alias_renames(warehouse: Warehouse, service: Service, state: StateStore,
                       sandbox_key: str, tmp_path: Path) -> None:
    seed_profiles(service, sandbox_key, [
        {"user_alias": {"alias_name": f"old{i}", "alias_label": "crm"},
         "_update_existing_only": False} for i in range(70)])
    rows = [{"updated_at": T0 + timedelta(seconds=i), "alias_label": "crm",
             "old_alias_name": f"old{i}", "new_alias_name": f"new{i}"} for i in range(70)]
    rows.append({"updated_at": T0, "alias_label": "crm", "old_alias_name": "old-x",
                 "new_alias_name": ""})
    warehouse.create("renames", [("updated_at", sa.DateTime()), ("alias_label", sa.String()),
                                 ("old_alias_name", sa.String()),
                                 ("new_alias_name", sa.String())])
    warehouse.insert("renames", rows)
    path = write_integration(tmp_path, "renames", kind_body(
        warehouse, service, "alias_renames", "renames", {}))
    accounted(sync_file(path, store=state).record, 71, 1)
    assert rejects(state, "renames") == {"crm|old-x": "NEW_ALIAS_NAME is empty"}
    for i in range(70):
        assert alias_profile(service, f"old{i}", "crm") is None
        assert alias_profile(service, f"new{i}", "crm") is not None
    assert sorted(len(b["alias_updates"]) for b in bodies(service, "/users/alias/update")) == [
        20, 50]  # requests of different users may arrive in either order


# --- SIGKILL and resume (subscriptions) ------------------------------------------------------


def test_subscriptions_killed_mid_run_resume_with_nothing_lost(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
) -> None:
    seed_profiles(service, sandbox_key, [{"external_id": f"k{i:03d}"} for i in range(300)])
    rows = [{"row_id": k, "updated_at": T0 + timedelta(seconds=k // 20),
             "external_id": f"k{k % 300:03d}", "group_id": "g1",
             "state": "subscribed" if k < 300 or k % 2 else "unsubscribed"}
            for k in range(600)]
    warehouse.create("subs_kill", [("row_id", sa.Integer()), ("updated_at", sa.DateTime()),
                                   ("external_id", sa.String()), ("group_id", sa.String()),
                                   ("state", sa.String())])
    warehouse.insert("subs_kill", rows)
    path = write_integration(tmp_path, "subs_kill", kind_body(
        warehouse, service, "subscriptions", "subs_kill",
        {"group_column": "GROUP_ID", "state_column": "STATE"},
        row_key=["ROW_ID"], extract_batch_rows=100, service={"max_in_flight": 1}))
    warehouse.engine.dispose()  # DuckDB: one process at a time may open the file
    state_url = f"sqlite:///{tmp_path / 'state.db'}"

    kill_during_request(path, service, sandbox_key, state_url, nth=4, endpoint=V2)
    before = len(service.requests(V2))
    assert before == 4  # three requests landed, the fourth was in flight at the kill

    record = resume_cli(path, state_url, sandbox_key)
    assert record["rows_read"] == record["rows_synced"] == 600
    assert record["rows_in_doubt"] == 0
    for i in range(300):  # the later row of each user wins: order held across the kill
        profile = service.profile(f"k{i:03d}")
        assert profile is not None
        assert profile["subscription_groups"]["g1"] == ("subscribed" if i % 2 else
                                                        "unsubscribed")
    resent = [ident for b in bodies(service, V2, skip=before) for obj in b["subscription_groups"]
              for ident in obj["external_ids"]]
    # the resumed run re-reads the window once: each row at most once, all rows covered
    assert len(resent) <= 600
    assert Counter(resent) == Counter(f"k{k % 300:03d}" for k in range(600 - len(resent), 600))
    assert open_state(state_url).cursor("subs_kill") is not None


def test_deletes_killed_mid_run_resume_with_nothing_lost_or_repeated(
    warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
) -> None:
    seed_profiles(service, sandbox_key, [{"external_id": f"x{i:03d}"} for i in range(260)])
    warehouse.create("del_kill", [("updated_at", sa.DateTime()), ("external_id", sa.String())])
    warehouse.insert("del_kill", [{"updated_at": T0 + timedelta(seconds=i // 7),
                                   "external_id": f"x{i:03d}"} for i in range(250)])
    path = write_integration(tmp_path, "del_kill", kind_body(
        warehouse, service, "deletes", "del_kill", {"identifiers": ["external_id"]},
        extract_batch_rows=100, service={"max_in_flight": 1}))
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    delete = "/users/delete"
    kill_during_request(path, service, sandbox_key, state_url, nth=3, endpoint=delete)
    record = resume_cli(path, state_url, sandbox_key)
    assert record["rows_read"] == record["rows_synced"] == 250
    left = sorted(p["external_id"] for p in service.profiles())
    assert left == [f"x{i:03d}" for i in range(250, 260)]  # nothing lost
    processed = [i for e in service.requests(delete) if e["status"] and e["status"] < 300
                 for i in e["body"]["external_ids"]]
    assert sorted(processed) == [f"x{i:03d}" for i in range(250)]  # nothing repeated


# --- shared rate budget ----------------------------------------------------------------------


def test_two_subscription_integrations_share_one_rate_budget(
    slow_service: Service, slow_subscriptions_sandbox: Any, tmp_path: Path,
) -> None:
    """Two integrations in one process, each with enough rows for 20 requests, against a
    sandbox allowing SUBSCRIPTION_LIMIT requests a second on the subscription group."""
    svc, budget = slow_service, SUBSCRIPTION_LIMIT - 2
    seed_profiles(svc, slow_subscriptions_sandbox.api_key,
                  [{"external_id": f"r{i:03d}"} for i in range(200)])
    paths = []
    for name, endpoint in (("news", "v2"), ("sms", "v1")):
        url = f"duckdb:///{tmp_path / f'{name}.duckdb'}"
        engine = sa.create_engine(url)
        wh = Warehouse(name, url, engine)
        wh.create("subs", [("updated_at", sa.DateTime()), ("external_id", sa.String()),
                           ("state", sa.String())])
        wh.insert("subs", [{"updated_at": T0 + timedelta(milliseconds=i),
                            "external_id": f"r{i:03d}", "state": "subscribed"}
                           for i in range(200)])
        engine.dispose()
        paths.append(write_integration(tmp_path, name, kind_body(
            url, svc, "subscriptions", "subs", {"group_id": f"sg-{name}", "state_column": "STATE",
                                         "endpoint": endpoint},
            service={"limits": {"ids_per_request": 10},
                     "rate_limit": {"requests": budget, "per_seconds": 1}})))
    budgets = RateBudgets()  # the integrations' rate_limit tightens the shared group budget
    records: dict[str, Any] = {}

    def run(path: Path) -> None:
        store = open_state(f"sqlite:///{tmp_path / (path.stem + '-state.db')}")
        try:
            records[path.stem] = sync_file(path, store=store, budgets=budgets).record
        except Exception as exc:  # reported by the assertion below, not lost in the thread
            records[path.stem] = {"error": repr(exc)}

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    elapsed = time.monotonic() - started
    assert [records[p.stem].get("rows_synced") for p in paths] == [200, 200], records

    entries = svc.requests(V2) + svc.requests(V1)
    assert len(entries) == 40
    assert {e["status"] for e in entries} <= {200, 201}  # never a 429
    per_window = Counter(math.floor(e["received_at"]) for e in entries)
    assert max(per_window.values()) <= SUBSCRIPTION_LIMIT
    # one shared budget: 40 requests at `budget` in each of the sandbox's 1-s windows (which
    # it follows) fill five windows at least; two budgets of their own would fill three, and
    # be answered 429 (2 x budget > SUBSCRIPTION_LIMIT)
    assert len(per_window) >= 40 / budget, per_window
    assert elapsed >= 3.0  # four edges at least after the first request
    for p in paths:
        profile = svc.profile("r000")
        assert profile is not None and profile["subscription_groups"][f"sg-{p.stem}"] == \
            "subscribed"


def test_the_delete_cap_refuses_an_over_large_run_and_sends_nothing(
    warehouse: Warehouse, service: Service, state: StateStore, sandbox_key: str,
    tmp_path: Path,
) -> None:
    from engage_sync.config.run_options import RunOptions
    from engage_sync.errors import RunRefused
    from engage_sync.status.record import page

    seed_profiles(service, sandbox_key, [{"external_id": f"c{i:03d}"} for i in range(30)])
    warehouse.create("deletes_sync", [("updated_at", sa.DateTime()),
                                      ("external_id", sa.String())])
    warehouse.insert("deletes_sync", [{"updated_at": T0, "external_id": f"c{i:03d}"}
                                      for i in range(30)])
    path = write_integration(tmp_path, "wipe", kind_body(
        warehouse, service, "deletes", "deletes_sync", {"identifiers": ["external_id"]},
        max_deletes=10))
    with pytest.raises(RunRefused, match=r"would delete 30 users.*max_deletes \(10\)"):
        sync_file(path, store=state)
    assert service.requests("/users/delete") == []
    assert len(service.profiles()) == 30
    assert state.cursor("wipe") is None
    record = page(state, "wipe", None).results[0]
    assert record["job_status"] == "error" and "max_deletes" in record["message"]

    done = sync_file(path, store=state, options=RunOptions(allow_deletes=30)).record
    assert done is not None and done["rows_synced"] == 30
    assert service.profiles() == []


def test_a_dry_run_of_deletes_lists_exactly_who_would_be_deleted(
    warehouse: Warehouse, service: Service, state: StateStore, tmp_path: Path,
) -> None:
    from engage_sync.config.run_options import RunOptions

    warehouse.create("deletes_sync", [("updated_at", sa.DateTime()),
                                      ("external_id", sa.String())])
    warehouse.insert("deletes_sync", [{"updated_at": T0, "external_id": f"c{i:03d}"}
                                      for i in range(120)])
    path = write_integration(tmp_path, "dry_wipe", kind_body(
        warehouse, service, "deletes", "deletes_sync", {"identifiers": ["external_id"]}))
    result = sync_file(path, store=state, options=RunOptions(dry_run=True)).dry_run
    assert result is not None and result.requests == 3
    assert sorted(json.loads(b) for b in result.sample) == [f"c{i:03d}" for i in range(120)]
    from engage_sync.adapters.wiring import run_direct  # what `run --dry-run` prints

    printed = run_direct(path, RunOptions(dry_run=True),
                         state_url=f"sqlite:///{tmp_path / 'other.db'}")
    assert printed is not None
    assert sorted(json.loads(s) for s in printed["sample"]) == [f"c{i:03d}" for i in range(120)]
    assert service.requests("/users/delete") == []


# --- SIGKILL and resume: identify, merges, alias renames --------------------------------------

_N = 160  # four requests of at most 50


def _identify_case(wh: Warehouse, svc: Service, key: str) -> tuple[str, dict[str, Any]]:
    seed_profiles(svc, key, [{"user_alias": {"alias_name": f"anon{i}", "alias_label": "web"},
                              "_update_existing_only": False} for i in range(_N)])
    wh.create("kill_identify", [("updated_at", sa.DateTime()), ("alias_name", sa.String()),
                                ("alias_label", sa.String()), ("external_id", sa.String())])
    wh.insert("kill_identify", [{"updated_at": T0 + timedelta(seconds=i // 10),
                                 "alias_name": f"anon{i}", "alias_label": "web",
                                 "external_id": f"id{i}"} for i in range(_N)])
    return "/users/identify", kind_body(wh, svc, "identify", "kill_identify", {
        "alias_name": "ALIAS_NAME", "alias_label": "ALIAS_LABEL"})


def _merges_case(wh: Warehouse, svc: Service, key: str) -> tuple[str, dict[str, Any]]:
    seed_profiles(svc, key, [{"external_id": f"{side}{i}"} for i in range(_N)
                             for side in ("old", "keep")])
    wh.create("kill_merges", [("updated_at", sa.DateTime()), ("merge_id", sa.String()),
                              ("keep_id", sa.String())])
    wh.insert("kill_merges", [{"updated_at": T0 + timedelta(seconds=i // 10),
                               "merge_id": f"old{i}", "keep_id": f"keep{i}"}
                              for i in range(_N)])
    return "/users/merge", kind_body(wh, svc, "merges", "kill_merges", {
        "merge": {"external_id": "MERGE_ID"}, "keep": {"external_id": "KEEP_ID"}})


def _renames_case(wh: Warehouse, svc: Service, key: str) -> tuple[str, dict[str, Any]]:
    seed_profiles(svc, key, [{"user_alias": {"alias_name": f"old{i}", "alias_label": "crm"},
                              "_update_existing_only": False} for i in range(_N)])
    wh.create("kill_renames", [("updated_at", sa.DateTime()), ("alias_label", sa.String()),
                               ("old_alias_name", sa.String()),
                               ("new_alias_name", sa.String())])
    wh.insert("kill_renames", [{"updated_at": T0 + timedelta(seconds=i // 10),
                                "alias_label": "crm", "old_alias_name": f"old{i}",
                                "new_alias_name": f"new{i}"} for i in range(_N)])
    return "/users/alias/update", kind_body(wh, svc, "alias_renames", "kill_renames", {})


def _effect_done(kind: str, svc: Service, i: int) -> bool:
    if kind == "identify":
        profile = alias_profile(svc, f"anon{i}", "web")
        return profile is not None and profile["external_id"] == f"id{i}"
    if kind == "merges":
        return svc.profile(f"old{i}") is None and svc.profile(f"keep{i}") is not None
    return (alias_profile(svc, f"new{i}", "crm") is not None
            and alias_profile(svc, f"old{i}", "crm") is None)


_ARRAYS = {"identify": "aliases_to_identify", "merges": "merge_updates",
           "alias_renames": "alias_updates"}
_CASES = {"identify": _identify_case, "merges": _merges_case, "alias_renames": _renames_case}


@pytest.mark.parametrize("kind", sorted(_CASES))
def test_identity_kinds_killed_mid_run_resume_with_nothing_lost_or_repeated(
    kind: str, warehouse: Warehouse, service: Service, sandbox_key: str, tmp_path: Path,
) -> None:
    endpoint, body = _CASES[kind](warehouse, service, sandbox_key)
    body["service"]["max_in_flight"] = 1
    path = write_integration(tmp_path, f"kill_{kind}", body)
    warehouse.engine.dispose()
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    kill_during_request(path, service, sandbox_key, state_url, nth=3, endpoint=endpoint)
    record = resume_cli(path, state_url, sandbox_key)
    assert record["rows_read"] == record["rows_synced"] == _N
    assert all(_effect_done(kind, service, i) for i in range(_N))  # nothing lost
    processed = [json.dumps(entry, sort_keys=True)
                 for e in service.requests(endpoint) if e["status"] and e["status"] < 300
                 for entry in e["body"][_ARRAYS[kind]]]
    assert len(processed) == len(set(processed)) == _N  # nothing repeated
