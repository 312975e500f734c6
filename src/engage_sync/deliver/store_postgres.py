"""The shared token bucket on PostgreSQL: one row per (service base URL, endpoint group).

Each take is one atomic `UPDATE ... RETURNING` in autocommit: the row lock serialises the
processes, the refill uses the server's clock (`statement_timestamp()`), so clocks of the
hosts taking part never matter. The table is created on first use, under an advisory lock
so that two processes starting together do not race on `CREATE TABLE`.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from engage_sync.deliver.budget_store import STORE_DEADLINE, guarded

TABLE = "engage_sync_rate_budget"
_LOCK_ID = 0x656E6761  # pg_advisory_lock key of the table's creation
_TIMEOUT_S = 5  # connect and statement timeout: a lost store is reported, not waited for

_CREATE = sa.text(f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    bucket text PRIMARY KEY,
    tokens double precision NOT NULL,
    stamp timestamptz NOT NULL,
    granted integer NOT NULL DEFAULT 0)""")
_INSERT = sa.text(f"INSERT INTO {TABLE} (bucket, tokens, stamp) "
                  "VALUES (:bucket, :cap, statement_timestamp()) ON CONFLICT (bucket) DO NOTHING")
# the tokens now: refilled by elapsed server time, capped at the capacity (one block)
_AVAIL = ("least(CAST(:cap AS double precision), tokens + :rate * "
          "extract(epoch from (statement_timestamp() - stamp))::double precision)")
# SET expressions all read the row as it was: `granted` and `tokens` agree on the same refill
_GRANT = f"CASE WHEN {_AVAIL} >= 1 THEN least(:n, floor({_AVAIL})) ELSE 0 END"
_TAKE = sa.text(f"""UPDATE {TABLE} SET
    granted = {_GRANT},
    tokens = {_AVAIL} - {_GRANT},
    stamp = statement_timestamp()
    WHERE bucket = :bucket RETURNING granted, tokens""")
_DRAIN = sa.text(f"""UPDATE {TABLE} SET
    tokens = least({_AVAIL}, -:rate * :seconds), stamp = statement_timestamp()
    WHERE bucket = :bucket""")


class PostgresTokenStore:
    """`TokenStore` on a PostgreSQL database (it may be the state database)."""

    backend = "postgres"

    def __init__(self, url: str, shown: str, deadline: float = STORE_DEADLINE) -> None:
        self.url = shown  # the URL as messages name it, its password hidden (by the opener)
        self.deadline = deadline  # seconds a call waits for the store to come back
        parsed = sa.engine.make_url(url)
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        self._engine = sa.create_engine(
            parsed, pool_size=2, max_overflow=4, pool_pre_ping=True,
            isolation_level="AUTOCOMMIT",
            connect_args={"connect_timeout": _TIMEOUT_S,
                          "options": f"-c statement_timeout={_TIMEOUT_S * 1000}"})
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresTokenStore({self.url})"

    def take(self, key: str, n: int, rate: float, capacity: float) -> tuple[int, float]:
        def call() -> tuple[int, float]:
            with self._engine.connect() as conn:
                self._ensure(conn, key, capacity)
                row = conn.execute(_TAKE, {"bucket": key, "n": n, "rate": rate,
                                           "cap": capacity}).one()
            granted, tokens = int(row[0]), float(row[1])
            return granted, 0.0 if granted else (1 - tokens) / rate

        return guarded(self, (SQLAlchemyError, OSError), call, deadline=self.deadline)

    def drain(self, key: str, rate: float, capacity: float, seconds: float) -> None:
        def call() -> None:
            with self._engine.connect() as conn:
                self._ensure(conn, key, capacity)
                conn.execute(_DRAIN, {"bucket": key, "rate": rate, "cap": capacity,
                                      "seconds": seconds})

        guarded(self, (SQLAlchemyError, OSError), call, deadline=self.deadline)

    def close(self) -> None:
        self._engine.dispose()

    def _ensure(self, conn: sa.Connection, key: str, capacity: float) -> None:
        """The table and the bucket's row exist (checked once per key and process)."""
        if key in self._known:
            return
        with self._lock:
            if not self._known:
                conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_ID})
                try:
                    conn.execute(_CREATE)
                finally:
                    conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_ID})
            conn.execute(_INSERT, {"bucket": key, "cap": capacity})
            self._known.add(key)
