"""Data points per workspace and UTC day: what runs reserved before sending, what they billed.

Part of `StateStore` (a mixin using only `self.engine`). One row per (workspace, day); a
workspace is the service's base URL, so every integration writing to it shares the row,
whichever process or machine runs it.

Invariants:
- a reservation is one conditional UPDATE (`points_reserved + n <= cap`): two processes can
  never both pass a cap that only one of them fits under (the database serialises the write);
- `points_reserved` is the day's claim: reservations of runs still going plus what finished
  runs billed; a finished run swaps its reservation for what it billed (`settle`);
- a run that fails before settling keeps its reservation: it may have billed that much.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from engage_sync.state.schema import spend, upsert


class Spend:
    """The StateStore's methods for the daily data-point cap."""

    engine: Engine

    def reserve_points(self, workspace: str, day: str, points: int, cap: int | None
                       ) -> tuple[bool, int]:
        """Reserve `points` of the workspace's day unless that passes `cap` (None: no cap).
        Returns (reserved, the day's claim before this reservation)."""
        with self.engine.begin() as conn:
            _ensure_row(conn, workspace, day)
            row = spend.c.workspace == workspace, spend.c.day == day
            fits = [] if cap is None else [spend.c.points_reserved + points <= cap]
            done = conn.execute(spend.update().where(*row, *fits).values(
                points_reserved=spend.c.points_reserved + points)).rowcount == 1
            claim = int(conn.scalar(sa.select(spend.c.points_reserved).where(*row)) or 0)
        return done, claim - points if done else claim

    def settle_points(self, workspace: str, day: str, reserved: int, billed: int) -> None:
        """A finished run's reservation replaced by what it billed."""
        with self.engine.begin() as conn:
            _ensure_row(conn, workspace, day)
            conn.execute(spend.update().where(
                spend.c.workspace == workspace, spend.c.day == day).values(
                points_reserved=spend.c.points_reserved - reserved + billed,
                points_billed=spend.c.points_billed + billed))

    def points_of_day(self, workspace: str, day: str) -> tuple[int, int]:
        """(reserved, billed) of the workspace's day."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(spend.c.points_reserved, spend.c.points_billed).where(
                spend.c.workspace == workspace, spend.c.day == day)).first()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))


def _ensure_row(conn: Connection, workspace: str, day: str) -> None:
    upsert(conn, spend, [{"workspace": workspace, "day": day, "points_reserved": 0,
                          "points_billed": 0}])
