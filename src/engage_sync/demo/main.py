"""`engage-sync demo`: the whole product on embedded defaults, in one command.

Builds a DuckDB warehouse with sample users, events and purchases (both row formats, a few
invalid rows, rows sharing a timestamp), starts the sandbox as a separate process on loopback
(the way a user would), runs the Prefect folder flow over `config/demo/`, prints the status
records and what the sandbox holds, changes a few rows, runs again and shows that only the
changes were sent.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import httpx

from engage_sync.adapters import telemetry
from engage_sync.demo.identity import SEED_TRACK_BODY, build_identity_tables, identity_effects

DEMO_KEY = "sandbox-demo-key"  # SANDBOX ONLY: the demo seed's key, accepted by nothing else
ROOT = Path(__file__).resolve().parents[3]  # the checkout: src/engage_sync/demo/main.py


def build_warehouse(path: Path, users: int = 200) -> None:
    """Sample tables; timestamps in the past so the default settle lag lets them through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", ".wal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    con.execute("""
        CREATE TABLE USERS_SYNC AS
        SELECT TIMESTAMP '2026-01-01 00:00:00' + to_seconds(i // 4) AS UPDATED_AT,
               'user-' || lpad(i::VARCHAR, 4, '0') AS EXTERNAL_ID,
               json_object('first_name', 'Name' || i, 'plan', CASE WHEN i % 3 = 0 THEN 'pro'
                   ELSE 'free' END, 'visits', i % 17, 'vip', i % 10 = 0)::VARCHAR AS PAYLOAD
        FROM range(?) t(i)""", [users])
    # invalid rows: unparseable JSON, missing identifier
    con.execute("""INSERT INTO USERS_SYNC VALUES
        (TIMESTAMP '2026-01-01 00:00:00', 'user-bad-json', '{"plan": '),
        (TIMESTAMP '2026-01-01 00:00:01', NULL, '{"plan": "free"}')""")
    con.execute("""
        CREATE TABLE EVENTS_SYNC AS
        SELECT 'evt-' || i AS EVENT_ID,
               TIMESTAMP '2026-01-02 00:00:00' + to_seconds(i // 5) AS UPDATED_AT,
               'user-' || lpad((i % ?)::VARCHAR, 4, '0') AS EXTERNAL_ID,
               json_object('name', CASE WHEN i % 2 = 0 THEN 'viewed_item' ELSE 'added_to_cart'
                   END, 'properties', json_object('item', 'sku-' || (i % 25)))::VARCHAR
                   AS PAYLOAD
        FROM range(500) t(i)""", [users])
    con.execute("""INSERT INTO EVENTS_SYNC VALUES
        ('evt-bad-prop', TIMESTAMP '2026-01-02 00:00:00', 'user-0001',
         '{"name": "viewed_item", "properties": {"$secret": 1}}')""")
    con.execute("""
        CREATE TABLE ORDERS AS
        SELECT 'order-' || i AS ORDER_ID,
               'user-' || lpad((i % ?)::VARCHAR, 4, '0') AS CUSTOMER_ID,
               'sku-' || (i % 25) AS SKU, 'USD' AS CURRENCY,
               round(5 + (i % 40) * 1.25, 2) AS AMOUNT,
               1 + i % 3 AS QTY, TIMESTAMP '2026-01-03 10:00:00' + to_minutes(i) AS ORDERED_AT,
               CASE WHEN i % 2 = 0 THEN 'web' ELSE 'store' END AS CHANNEL,
               TIMESTAMP '2026-01-03 12:00:00' + to_seconds(i // 10) AS UPDATED_AT
        FROM range(120) t(i)""", [users])
    con.execute("""INSERT INTO ORDERS VALUES ('order-bad-currency', 'user-0002', 'sku-1',
        'DOLLARS', 9.99, 1, TIMESTAMP '2026-01-03 10:00:00', 'web',
        TIMESTAMP '2026-01-03 12:00:00')""")
    build_identity_tables(con)
    con.close()


def change_rows(path: Path) -> None:
    """The second act: three users change, two new events, one new order."""
    con = duckdb.connect(str(path))
    con.execute("""UPDATE USERS_SYNC SET UPDATED_AT = TIMESTAMP '2026-02-01 00:00:00',
        PAYLOAD = json_object('plan', 'enterprise')::VARCHAR
        WHERE EXTERNAL_ID IN ('user-0003', 'user-0004', 'user-0005')""")
    con.execute("""INSERT INTO EVENTS_SYNC VALUES
        ('evt-new-1', TIMESTAMP '2026-02-01 00:00:00', 'user-0003', '{"name": "upgraded"}'),
        ('evt-new-2', TIMESTAMP '2026-02-01 00:00:00', 'user-0004', '{"name": "upgraded"}')""")
    con.execute("""INSERT INTO ORDERS VALUES ('order-new', 'user-0005', 'sku-9', 'EUR', 99.0,
        1, TIMESTAMP '2026-02-01 00:00:00', 'web', TIMESTAMP '2026-02-01 00:00:00')""")
    con.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def sandbox_process(port: int, seed: Path, log_path: Path) -> Iterator[str]:
    """Start `engage-sandbox` as its own process on 127.0.0.1 and stop it afterwards."""
    base = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engage_sandbox.cli", "--port", str(port), "--seed", str(seed)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the sandbox exited early; see {log_path}")
                try:
                    if httpx.get(f"{base}/_sandbox/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the sandbox did not start in 30 s; see {log_path}")
                time.sleep(0.2)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _profile(base: str, query: dict[str, str]) -> dict[str, Any] | None:
    r = httpx.get(f"{base}/_sandbox/profiles", params=query)
    return None if r.status_code == 404 else dict(r.json())


def _summary(counters: dict[str, Any]) -> dict[str, Any]:
    """The sandbox counters without the per-user breakdown (too long to print)."""
    return {k: v for k, v in counters.items() if k != "events_by_user"}


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {k: after[k] - before.get(k, 0) for k in ("events", "purchases",
            "attributes_processed", "data_points") if isinstance(after.get(k), int)}


def _show(title: str, value: Any) -> None:
    print(f"\n=== {title}")
    print(json.dumps(value, indent=2, default=str))


def run_demo(workdir: Path, port: int = 0) -> int:
    from engage_sync.adapters.flows import sync_folder
    from engage_sync.adapters.wiring import open_state
    from engage_sync.status.record import page

    logging.getLogger("httpx").setLevel(logging.WARNING)
    telemetry.turn_off()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    warehouse = workdir / "warehouse.duckdb"
    state_db = workdir / "state.db"
    state_db.unlink(missing_ok=True)
    build_warehouse(warehouse)
    port = port or free_port()
    seed = ROOT / "config" / "sandbox-seed.yaml"
    with sandbox_process(port, seed, workdir / "sandbox.log") as base:
        os.environ.update({
            "ENGAGE_DEMO_DIR": str(workdir),
            "ENGAGE_BASE_URL": base,
            "ENGAGE_API_KEY": DEMO_KEY,
        })
        state_url = f"sqlite:///{state_db}"
        folder = str(ROOT / "config" / "demo")
        print(f"sandbox on {base}; warehouse {warehouse}; state {state_db}")
        # profiles that the identify, merge and alias-rename rows act on exist beforehand
        httpx.post(f"{base}/users/track", json=SEED_TRACK_BODY,
                   headers={"Authorization": f"Bearer {DEMO_KEY}"}).raise_for_status()
        first = sync_folder(folder, state_url=state_url)
        _show("first run: status records", first)
        counters = httpx.get(f"{base}/_sandbox/counters").json()
        _show("the sandbox after the first run (counters)", _summary(counters))
        profile = httpx.get(f"{base}/_sandbox/profiles", params={"external_id": "user-0003"})
        _show("profile user-0003", profile.json())
        _show("identity and subscription syncs, as the sandbox sees them",
              identity_effects(lambda q: _profile(base, q)))

        change_rows(warehouse)
        second = sync_folder(folder, state_url=state_url)
        _show("second run (only the changes): status records", second)
        after = httpx.get(f"{base}/_sandbox/counters").json()
        _show("what the second run added at the sandbox (only the changed rows)",
              _delta(counters, after))
        store = open_state(state_url)
        for name in sorted(p.stem for p in Path(folder).glob("*.yaml")):
            _show(f"engage-sync status {name}", page(store, name, None).body())
        print("\nrejected rows: run `engage-sync errors 10_users --state-url "
              f"{state_url}` (and 20_events, 30_purchases)")
    return 0
