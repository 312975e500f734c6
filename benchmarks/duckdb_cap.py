"""A large DuckDB window read under a memory cap: does every slice sort within it, how long
does the read take, and how large does the reading process grow?

Builds (or reuses) a DuckDB file of N rows in the service's sync format stored out of cursor
order (the case where each slice scans the table, `read/duckdb_slices.py`), then for each cap
reads the whole window through `stream_batches` in a fresh process with the cap set as the
run sets it (`adapters.wiring`: `SET memory_limit` on each connection), `--runs` times,
alternating the caps. Prints per read: rows, seconds, the process's peak RSS, or DuckDB's
error when a slice does not fit.

    .venv/bin/python benchmarks/duckdb_cap.py [--rows 20000000] [--caps 128MB,96MB] [--runs 1]
        [--slice-rows N] (rows a slice holds; default the product's, until 64 slices; more
        than --rows: the window in one sort, as a SQL `query` source is read)
        [--later-rows] (each row also counts its user's later rows, as mapped attributes with
        `superseded_rows: skip` are read) [--users N] (with --later-rows: N users, a row's
        user the row number modulo N, so each user's rows spread over the whole window;
        default a user a row) [--before REVISION] (each cap also read by REVISION's code, in
        turn: `cap@before` in the output) [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BEFORE = "@before"

TABLE = "USERS_SYNC"


def build(path: Path, rows: int) -> None:
    """N rows of ≈ 90 bytes, in an order unrelated to UPDATED_AT (a hash of the row number);
    USER_N is the row number, for `--users` to take modulo."""
    import duckdb

    if path.exists():
        con = duckdb.connect(str(path), read_only=True)
        try:
            if con.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (rows,) and \
                    "USER_N" in [c[0] for c in con.execute(f"DESCRIBE {TABLE}").fetchall()]:
                return
        finally:
            con.close()
        path.unlink()
    con = duckdb.connect(str(path))
    try:
        con.execute(f"""
            CREATE TABLE {TABLE} AS
            SELECT TIMESTAMP '2024-01-01' + to_microseconds(i * 1000) AS UPDATED_AT,
                   'user-' || lpad(i::VARCHAR, 9, '0') AS EXTERNAL_ID,
                   '{{"plan":"' || CASE i % 3 WHEN 0 THEN 'gold' ELSE 'free' END
                     || '","score":' || (i % 1000)::VARCHAR || ',"vip":false}}' AS PAYLOAD,
                   i AS USER_N
            FROM range(?) t(i) ORDER BY hash(i)""", [rows])
        con.execute("CHECKPOINT")
    finally:
        con.close()


def read_once(path: Path, cap: str, slice_rows: int | None, later_rows: bool,
              users: int) -> dict[str, object]:
    """Child side: the whole window through the product's reader under `cap`; with `users`,
    through a view whose USER_ID is USER_N modulo `users`."""
    import sqlalchemy as sa

    from engage_sync.cursor.window import Window
    from engage_sync.read import duckdb_slices
    from engage_sync.read.extract import SourceSpec, stream_batches

    if slice_rows:
        duckdb_slices.SLICE_ROWS = slice_rows
    engine = sa.create_engine(f"duckdb:///{path}")

    def connected(dbapi_conn: Any, _: Any) -> None:  # the limit as `adapters.wiring` sets it
        dbapi_conn.execute(f"SET memory_limit = '{cap}'")
        if users:
            dbapi_conn.execute(f"CREATE OR REPLACE TEMP VIEW {TABLE}_BY_USER AS SELECT *, "
                               f"'u' || (USER_N % {users})::VARCHAR AS USER_ID FROM {TABLE}")

    sa.event.listen(engine, "connect", connected)
    user = "USER_ID" if users else "EXTERNAL_ID"
    spec = SourceSpec(integration="bench", table=f"{TABLE}_BY_USER" if users else TABLE,
                      schema=None, query=None,
                      cursor_column="UPDATED_AT", key_columns=("EXTERNAL_ID",),
                      columns=tuple(dict.fromkeys(("UPDATED_AT", "EXTERNAL_ID", "PAYLOAD", user))),
                      superseded_by=(user,) if later_rows else ())
    started = time.perf_counter()
    rows, latest, error = 0, 0, None
    try:
        for batch in stream_batches(engine, spec, Window(start=None, signpost=None), 10_000):
            rows += batch.num_rows
            if later_rows:
                latest += batch.num_rows - batch.column("engage_later_rows").to_numpy().astype(
                    bool).sum()
    except Exception as exc:  # DuckDB's out-of-memory error is what this measures
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return {"cap": cap, "rows": rows, **({"latest": int(latest)} if later_rows else {}),
            "s": round(time.perf_counter() - started, 2), "peak_rss_mb": peak_rss_mb(),
            "error": error}


def peak_rss_mb() -> int:
    """This process's peak RSS (VmHWM: its own, where getrusage's maximum also keeps the
    parent's from before the exec)."""
    status = Path("/proc/self/status").read_text()
    return round(int(status.split("VmHWM:")[1].split()[0]) / 1024)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000_000)
    p.add_argument("--caps", default="128MB,96MB")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--slice-rows", type=int, default=0)
    p.add_argument("--later-rows", action="store_true")
    p.add_argument("--users", type=int, default=0)
    p.add_argument("--before", metavar="REVISION")
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-cap-bench"))
    p.add_argument("--child", nargs=2, metavar=("PATH", "CAP"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(read_once(Path(args.child[0]), args.child[1], args.slice_rows,
                                   args.later_rows, args.users)))
        return 0
    folder = Path(args.workdir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"shuffled_{args.rows}.duckdb"
    build(path, args.rows)
    caps = args.caps.split(",")
    found: dict[str, list[dict[str, object]]] = {
        name: [] for cap in caps for name in (cap, *([cap + BEFORE] if args.before else []))}
    before = None
    if args.before:  # here, not in the reading child: the module imports Prefect's tests
        from benchmarks.user_command import code_of

        before = code_of(args.before, folder)
    for _ in range(args.runs):
        for name, runs in found.items():
            cap = name.removesuffix(BEFORE)
            env = {**os.environ, **({"PYTHONPATH": str(before)} if name != cap and before
                                    else {})}
            out = subprocess.run([sys.executable, __file__, "--child", str(path), cap,
                                  "--slice-rows", str(args.slice_rows),
                                  "--users", str(args.users),
                                  *(["--later-rows"] if args.later_rows else [])],
                                 check=True, capture_output=True, text=True, env=env).stdout
            result = {**json.loads(out.strip().splitlines()[-1]), "cap": name}
            runs.append(result)
            print(json.dumps(result), flush=True)
    for cap, runs in found.items():
        ok = [r for r in runs if not r["error"]]
        if ok:
            print(f"{cap}: {len(ok)}/{len(runs)} read to the end; median "
                  f"{statistics.median(float(r['s']) for r in ok):.1f} s, peak RSS median "  # type: ignore[arg-type]
                  f"{statistics.median(int(r['peak_rss_mb']) for r in ok)} MB")  # type: ignore[call-overload]
        else:
            print(f"{cap}: every read failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
