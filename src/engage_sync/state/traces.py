"""What became of each row a tracing run read (`trace: true`), for `engage-sync trace`.

Part of `StateStore` (a mixin using only `self.engine`). One row per (run, row key): the key is
kept as a 128-bit hash (`key_hash`), so the table holds neither a key nor a value; the
attribute names sent and those the field diff left out as unchanged are names only. A row
read twice by one run keeps its last outcome. Pruned with row errors (`retention`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
import xxhash
from sqlalchemy.engine import Engine

from engage_sync.state.row_errors import request_of
from engage_sync.state.schema import row_errors, runs, traces, upsert


def key_hash(row_key: str) -> bytes:
    """The trace's key of a row key (as `engage-sync errors` shows it)."""
    return xxhash.xxh3_128_digest(row_key.encode("utf-8"))


class Traces:
    """The StateStore's methods for row traces."""

    engine: Engine

    def record_traces(self, run_id: str, integration: str,
                      rows: Sequence[tuple[str, str, Sequence[str], Sequence[str], str | None]]
                      ) -> None:
        """(row key, outcome, names sent, names unchanged, reason) of rows of a run."""
        if not rows:
            return
        now = datetime.now(UTC)
        values = {key_hash(k): {"run_id": run_id, "key_hash": key_hash(k),
                                "integration": integration, "outcome": outcome,
                                "sent": ",".join(sent), "unchanged": ",".join(same),
                                "reason": reason, "recorded_at": now}
                  for k, outcome, sent, same, reason in rows}
        with self.engine.begin() as conn:
            upsert(conn, traces, list(values.values()),
                   update=("outcome", "sent", "unchanged", "reason", "recorded_at"))

    def trace(self, integration: str, row_key: str) -> list[dict[str, Any]]:
        """Every traced run of `integration` that read `row_key`, oldest first: the run, its
        time, mode and status, the row's outcome, names, and its row error's request number and
        reason when it has one."""
        query = (sa.select(runs.c.run_id, runs.c.integration.label("run_name"), runs.c.seq,
                           runs.c.sync_start_time, runs.c.mode, runs.c.job_status,
                           traces.c.outcome, traces.c.sent, traces.c.unchanged, traces.c.reason)
                 .join(runs, runs.c.run_id == traces.c.run_id)
                 .where(traces.c.integration == integration,
                        traces.c.key_hash == key_hash(row_key))
                 .order_by(runs.c.sync_start_time, runs.c.seq))
        with self.engine.connect() as conn:
            found = [dict(r._mapping) for r in conn.execute(query)]
            errors = conn.execute(sa.select(row_errors.c.run_id, row_errors.c.position,
                                            row_errors.c.reason).where(
                row_errors.c.run_id.in_([f["run_id"] for f in found]),
                row_errors.c.row_key == row_key)).all() if found else []
        by_run = {run_id: (request_of(position), reason) for run_id, position, reason in errors}
        for f in found:
            request, reason = by_run.get(f["run_id"], (None, None))
            f["request"] = request
            f["reason"] = f["reason"] or reason
            f["sent"] = [n for n in f["sent"].split(",") if n]
            f["unchanged"] = [n for n in f["unchanged"].split(",") if n]
        return found

    def prune_traces(self, older_than: datetime) -> int:
        """Traces recorded before `older_than`; how many were deleted."""
        with self.engine.begin() as conn:
            return conn.execute(traces.delete().where(
                traces.c.recorded_at < older_than)).rowcount or 0
