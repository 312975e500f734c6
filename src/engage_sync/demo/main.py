"""`engage-sync demo`: the whole product on embedded defaults, in one command.

Builds a DuckDB warehouse with sample users, events and purchases (both row formats, a few
deliberately invalid rows, rows sharing a timestamp), starts the sandbox as a separate process
on loopback (the way a user would), runs the Prefect folder flow over `config/demo/`, changes a
few rows, runs again and shows that only the changes were sent.

What it prints says what it shows: the deliberate bad rows first (why every first run ends
`partial`), then one line per integration and run, the rows rejected with their reasons, what
the sandbox holds, one integration's status records and the commands that show the rest. The
runs' own log lines stay off the console below WARNING (they are in the flow runs' logs), unless
the command logs at DEBUG.
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


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {k: after[k] - before.get(k, 0) for k in ("events", "purchases",
            "attributes_processed", "data_points") if isinstance(after.get(k), int)}


BAD_ROWS = ("The demo tables hold deliberate bad rows, one or two a table (JSON that does not "
            "parse, a row without its user key, an event property starting with `$`, a "
            "currency that is not one...): so each integration's first run ends `partial`, its "
            "bad rows rejected and recorded with their reasons (listed below), every other row "
            "sent.")


def summary(name: str, record: dict[str, Any]) -> str:
    """One line of a run's status record: its status and what became of the rows it read."""
    if "job_status" not in record:  # a dry run's summary or a skip: said as it is
        return f"  {name:<17} {json.dumps(record, default=str)}"
    rejected = int(record.get("rows_rejected") or 0)
    failed = int(record.get("rows_failed_with_errors") or 0) - rejected  # the rest: refused
    line = (f"  {name:<17} {record['job_status']:<8} read {record.get('rows_read', 0)}: synced "
            f"{record.get('rows_synced', 0)}, rejected {rejected}, failed {failed}, unchanged "
            f"{record.get('rows_unchanged', 0)}; {record.get('data_points_sent', 0)} data points")
    if record.get("rows_in_doubt"):
        line += f", {record['rows_in_doubt']} rows in doubt"
    return line


def _section(title: str, lines: list[str]) -> None:
    print(f"\n=== {title}")
    for line in lines:
        print(line)


@contextmanager
def _quiet() -> Iterator[None]:
    """The runs' own log lines (Prefect's, the progress, the records as dicts) kept off the
    console below WARNING, unless the command logs at DEBUG; the flow runs' logs keep them."""
    def loud(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING

    root = logging.getLogger()
    handlers = [] if root.level <= logging.DEBUG else list(root.handlers)
    for handler in handlers:
        handler.addFilter(loud)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(loud)


def _ui() -> str:
    """Where the flow runs' logs are: the Prefect UI's runs page, or what to start for one."""
    from prefect.settings import PREFECT_UI_URL

    url = PREFECT_UI_URL.value()
    return f"{url}/runs" if url else "the Prefect UI (`prefect server start`)"


def _rejected(store: Any, records: dict[str, Any]) -> list[str]:
    """Each run's rejected rows: integration, row key, reason (never a payload value)."""
    from engage_sync.status.record import shown_key

    lines = []
    for name, record in records.items():
        run_id = record.get("run_id") if isinstance(record, dict) else None
        for row in store.run_errors(run_id, limit=20) if run_id else []:
            lines.append(f"  {name:<17} {shown_key(row['row_key']):<30} {row['reason']}")
    return lines


def _sandbox_lines(base: str, counters: dict[str, Any]) -> list[str]:
    """What the sandbox holds, one fact a line."""
    profile = _profile(base, {"external_id": "user-0003"}) or {}
    requests = ", ".join(f"{path} {n}" for path, n in counters.get("requests", {}).items())
    return [
        f"  requests: {requests}",
        f"  events {counters.get('events')}, purchases {counters.get('purchases')}, "
        f"attributes processed {counters.get('attributes_processed')}, data points "
        f"{counters.get('data_points')}",
        f"  profile user-0003: attributes {json.dumps(profile.get('attributes'))}, "
        f"subscriptions {json.dumps(profile.get('subscription_groups'))}, "
        f"events {len(profile.get('events') or [])}, "
        f"purchases {len(profile.get('purchases') or [])}",
        *(f"  {what}: {json.dumps(seen)}"
          for what, seen in identity_effects(lambda q: _profile(base, q)).items()),
    ]


def _synced(folder: Path, state_url: str) -> dict[str, Any]:
    """The folder flow's status records by integration (a flow that failed raises its alert,
    said in one line by the command)."""
    from engage_sync.adapters.flows import sync_folder

    records = sync_folder(str(folder), state_url=state_url)
    if not isinstance(records, dict):
        raise TypeError(f"the folder flow returned {records!r}")
    return records


def run_demo(workdir: Path, port: int = 0) -> int:
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
    folder = ROOT / "config" / "demo"
    with sandbox_process(port, seed, workdir / "sandbox.log") as base, _quiet():
        os.environ.update({
            "ENGAGE_DEMO_DIR": str(workdir),
            "ENGAGE_BASE_URL": base,
            "ENGAGE_API_KEY": DEMO_KEY,
        })
        print(f"engage-sync demo: the integrations of {folder} run twice as the Prefect folder "
              f"flow, from a DuckDB warehouse to the sandbox (a local stand-in for the "
              f"service).\n  sandbox {base} (its log: {workdir / 'sandbox.log'})\n"
              f"  warehouse {warehouse}\n  state {state_db}\n  the flow runs' logs: {_ui()}")
        print(f"\n{BAD_ROWS}")
        # profiles that the identify, merge and alias-rename rows act on exist beforehand
        httpx.post(f"{base}/users/track", json=SEED_TRACK_BODY,
                   headers={"Authorization": f"Bearer {DEMO_KEY}"}).raise_for_status()
        _two_runs(folder, warehouse, f"sqlite:///{state_db}", base)
    return 0


def _two_runs(folder: Path, warehouse: Path, state_url: str, base: str) -> None:
    """The first run, a few rows changed, the second; each said as it ends."""
    from engage_sync.adapters.wiring import open_state
    from engage_sync.status.record import page

    first = _synced(folder, state_url)
    store = open_state(state_url)
    _section("first run: every row (status, then what became of the rows read)",
             [summary(name, record) for name, record in first.items()])
    _section("the rows it rejected, on purpose (integration, row key, reason)",
             _rejected(store, first))
    counters = httpx.get(f"{base}/_sandbox/counters").json()
    _section("what the sandbox holds after the first run", _sandbox_lines(base, counters))

    change_rows(warehouse)
    second = _synced(folder, state_url)
    _section("second run: 3 users changed, 2 events and 1 order added; only those are read "
             "and sent", [summary(name, record) for name, record in second.items()])
    added = _delta(counters, httpx.get(f"{base}/_sandbox/counters").json())
    print("  the sandbox received: " + ", ".join(f"{k} +{v}" for k, v in added.items()))
    _section("status records of 10_users, newest first (`engage-sync status 10_users`)",
             json.dumps(page(store, "10_users", None).body(), indent=2,
                        default=str).splitlines())
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    _section("where to look", [
        f"  engage-sync status NAME --state-url {state_url}   its runs' status records",
        f"  engage-sync errors NAME --state-url {state_url}   its rejected and failed rows, "
        "with reasons",
        f"  NAME: any of {', '.join(names)}",
    ])
