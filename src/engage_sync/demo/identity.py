"""Demo data of the subscription and identity kinds (config/demo/05, 06, 07, 15 and 90).

`build_identity_tables(con)` creates their DuckDB tables, each with one invalid row so the
status records show a rejection. The identity kinds act on profiles that exist before the
first run: send `SEED_TRACK_BODY` to `/users/track` first (alias-only web sessions, legacy CRM
duplicates, CRM aliases). `identity_effects(get)` then reads, through the sandbox's control
plane, what each kind changed.

Expected after the demo's first run:
- identify: the alias-only profiles `web_session:anon-0000..0009` carry `user-0000..0009`;
- merges: `legacy-0010..0014` are gone, `user-0010..0014` gained their `legacy_crm_tier`;
- alias renames: `crm:crm-old-0020..0024` are now `crm:crm-new-0020..0024`;
- subscriptions: even users 0..58 subscribed to `sg-newsletter`, odd ones unsubscribed, except
  user-0000 who unsubscribed later (row order per user holds);
- deletes: `user-0190..0199` are gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb

SEED_TRACK_BODY: dict[str, Any] = {"attributes": [
    *({"user_alias": {"alias_name": f"anon-{i:04d}", "alias_label": "web_session"},
       "_update_existing_only": False, "last_page": "/pricing"} for i in range(10)),
    *({"external_id": f"legacy-{i:04d}", "legacy_crm_tier": "gold"} for i in range(10, 15)),
    *({"external_id": f"user-{i:04d}", "signup_source": "web"} for i in range(10, 15)),
    *({"user_alias": {"alias_name": f"crm-old-{i:04d}", "alias_label": "crm"},
       "_update_existing_only": False} for i in range(20, 25)),
]}


def build_identity_tables(con: duckdb.DuckDBPyConnection) -> None:
    """IDENTIFY_SYNC, MERGES_SYNC, ALIAS_RENAMES, SUBSCRIPTIONS_SYNC and DELETES_SYNC."""
    con.execute("""
        CREATE OR REPLACE TABLE IDENTIFY_SYNC AS
        SELECT TIMESTAMP '2026-01-01 00:00:00' + to_seconds(i) AS UPDATED_AT,
               'anon-' || lpad(i::VARCHAR, 4, '0') AS ALIAS_NAME, 'web_session' AS ALIAS_LABEL,
               'user-' || lpad(i::VARCHAR, 4, '0') AS EXTERNAL_ID
        FROM range(10) t(i)""")
    con.execute("""INSERT INTO IDENTIFY_SYNC VALUES
        (TIMESTAMP '2026-01-01 00:01:00', 'anon-9999', 'web_session', NULL)""")
    con.execute("""
        CREATE OR REPLACE TABLE MERGES_SYNC AS
        SELECT TIMESTAMP '2026-01-01 00:00:00' + to_seconds(i) AS UPDATED_AT,
               'legacy-' || lpad(i::VARCHAR, 4, '0') AS LEGACY_ID,
               'user-' || lpad(i::VARCHAR, 4, '0') AS EXTERNAL_ID
        FROM range(10, 15) t(i)""")
    con.execute("""INSERT INTO MERGES_SYNC VALUES
        (TIMESTAMP '2026-01-01 00:01:00', 'user-0016', 'user-0016')""")
    con.execute("""
        CREATE OR REPLACE TABLE ALIAS_RENAMES AS
        SELECT TIMESTAMP '2026-01-01 00:00:00' + to_seconds(i) AS UPDATED_AT,
               'crm' AS ALIAS_LABEL, 'crm-old-' || lpad(i::VARCHAR, 4, '0') AS OLD_ALIAS_NAME,
               'crm-new-' || lpad(i::VARCHAR, 4, '0') AS NEW_ALIAS_NAME
        FROM range(20, 25) t(i)""")
    con.execute("""INSERT INTO ALIAS_RENAMES VALUES
        (TIMESTAMP '2026-01-01 00:01:00', 'crm', 'crm-old-0099', NULL)""")
    con.execute("""
        CREATE OR REPLACE TABLE SUBSCRIPTIONS_SYNC AS
        SELECT TIMESTAMP '2026-01-04 00:00:00' + to_seconds(i) AS UPDATED_AT,
               'user-' || lpad(i::VARCHAR, 4, '0') AS EXTERNAL_ID,
               'sg-newsletter' AS SUBSCRIPTION_GROUP_ID,
               CASE WHEN i % 2 = 0 THEN 'subscribed' ELSE 'unsubscribed' END
                   AS SUBSCRIPTION_STATE
        FROM range(60) t(i)""")
    con.execute("""INSERT INTO SUBSCRIPTIONS_SYNC VALUES
        (TIMESTAMP '2026-01-04 00:05:00', 'user-0000', 'sg-newsletter', 'unsubscribed'),
        (TIMESTAMP '2026-01-04 00:05:00', 'user-0003', 'sg-product-updates', 'subscribed'),
        (TIMESTAMP '2026-01-04 00:05:01', 'user-0004', 'sg-product-updates', 'maybe')""")
    con.execute("""
        CREATE OR REPLACE TABLE DELETES_SYNC AS
        SELECT TIMESTAMP '2026-01-05 00:00:00' + to_seconds(i) AS UPDATED_AT,
               'user-' || lpad(i::VARCHAR, 4, '0') AS EXTERNAL_ID
        FROM range(190, 200) t(i)""")
    con.execute("""INSERT INTO DELETES_SYNC VALUES
        (TIMESTAMP '2026-01-05 00:01:00', NULL)""")


Profile = dict[str, Any] | None


def identity_effects(get: Callable[[dict[str, str]], Profile]) -> dict[str, Any]:
    """What the kinds changed, read through `get(query)`: a GET of /_sandbox/profiles with the
    query's parameters, returning the profile or None on 404."""
    def alias(name: str, label: str) -> Profile:
        return get({"alias_name": name, "alias_label": label})

    def ext(external_id: str) -> Profile:
        return get({"external_id": external_id})

    identified = [(alias(f"anon-{i:04d}", "web_session") or {}).get("external_id")
                  for i in range(10)]
    merged = [(ext(f"user-{i:04d}") or {}).get("attributes", {}).get("legacy_crm_tier")
              for i in range(10, 15)]
    states = [(ext(f"user-{i:04d}") or {}).get("subscription_groups", {}) for i in range(4)]
    return {
        "identify: external ids of web_session:anon-0000..0009": identified,
        "merges: legacy-0010..0014 left": sum(ext(f"legacy-{i:04d}") is not None
                                              for i in range(10, 15)),
        "merges: legacy_crm_tier on user-0010..0014": merged,
        "alias renames: crm-new-0020..0024 found": sum(
            alias(f"crm-new-{i:04d}", "crm") is not None for i in range(20, 25)),
        "subscriptions of user-0000..0003": states,
        "deletes: user-0190..0199 left": sum(ext(f"user-{i:04d}") is not None
                                             for i in range(190, 200)),
    }
