"""Where a first diffed run's end goes: the field helper's store of N records into a SQLite
state file (`field_store_sql.store_sqlite_file`, as the helper runs it), in its pieces and
its variants, each on a fresh state file with another connection open (as the run's is):

- `fresh`: the integration's record empty;
- `after a fold`: the record already holding `--folded` users (a first run's own log of its
  first 20,000 objects, folded at its close before the helper stores);
- `among others`: two other integrations' records of `--others` users each, before and
  after this one's in key order (a state database several integrations share);
- `the run's N logged`: the run's own first `--folded` users in the state's field log, as a
  first run leaves them at its close; timed with what it costs to write them too: `folded
  first` (the run's fold, then the store, as a run on PostgreSQL ends) or `in the pass` (the
  store takes them in its one sorted pass, `with_log`);
- `sorted source`: the helper's table already in key order (a WITHOUT ROWID table keyed
  (user_key, rowid)): no sort at the end, paid for by appending in key order during the run,
  whose CPU the `append` lines give (2 MB of page cache, as the helper has);
- `as the helper runs it`: the store as the helper runs it (`committed`: the run goes on
  once the records are committed, the WAL's copy into the file follows), on a file of this
  release's page size and on one of SQLite's 4 KB;
- `deferred`: a design not taken, measured: the end only appends the records to the state's
  field log (no sort, no keyed insert), and the next run's open folds them
  (`StateStore.fold_fields`), so the keyed write moves to the next run instead of going.

    .venv/bin/python benchmarks/helper_store.py [--rows 1000000] [--attributes 5] [--runs 3]
        [--folded 20000] [--others 200000]

Prints each case's wall and CPU seconds (medians of `--runs`), and the pieces of the fresh
store: the sort (the store with the source sorted already, subtracted), the inserts, and
the commit.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

from engage_sync.state import field_store_sql as fss
from engage_sync.state.schema import PAGE_SIZE
from engage_sync.state.store import StateStore

INTEGRATION = "bench_attributes"
CACHE = "cache_size=-2048"  # the helper's page cache while it appends (diff/helper.py)


def helper_file(path: str, records: list[tuple[bytes, bytes]], keyed: bool) -> float:
    """The helper's table as it leaves the run; returns the CPU seconds of appending."""
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=OFF", "synchronous=OFF", CACHE):
        db.execute(f"PRAGMA {pragma}")
    if keyed:
        db.execute("CREATE TABLE log (user_key BLOB NOT NULL, rowid INTEGER NOT NULL, digests "
                   "BLOB NOT NULL, PRIMARY KEY (user_key, rowid)) WITHOUT ROWID")
    else:
        db.execute("CREATE TABLE log (user_key BLOB NOT NULL, digests BLOB NOT NULL)")
    cpu = time.process_time()
    db.execute("BEGIN")
    for i in range(0, len(records), 900):  # about a settle's worth a frame
        chunk = records[i:i + 900]
        if keyed:
            db.executemany("INSERT INTO log VALUES (?, ?, ?)",
                           [(k, i + j, d) for j, (k, d) in enumerate(chunk)])
        else:
            db.executemany("INSERT INTO log VALUES (?, ?)", chunk)
    db.execute("COMMIT")
    db.close()
    return time.process_time() - cpu


def state_file(where: str, fill: Callable[[sqlite3.Connection], None],
               page_size: int | None = None) -> str:
    """A fresh state file (`page_size`: made with that page size first, as a file made before
    this release has SQLite's 4,096), filled by `fill`."""
    path = tempfile.mkdtemp(dir=where) + "/state.db"
    if page_size is not None:
        made = sqlite3.connect(path)
        made.execute(f"PRAGMA page_size={int(page_size)}")
        made.execute("PRAGMA journal_mode=WAL")
        made.close()
    StateStore.from_url(f"sqlite:///{path}").engine.dispose()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN")
    fill(db)
    db.execute("COMMIT")
    db.close()
    return path


@contextlib.contextmanager
def run_connection(state: str) -> Iterator[None]:
    """The run's own connection to the state file, open (and having read it) meanwhile."""
    other = sqlite3.connect(state)
    other.execute("SELECT count(*) FROM engage_fields").fetchall()
    try:
        yield
    finally:
        other.close()


def store(state: str, helper: str, pieces: dict[str, list[float]] | None = None) -> float:
    """The helper's store, timed; the run's own connection stays open meanwhile."""
    with run_connection(state):
        return _store(state, helper, pieces)


def _store(state: str, helper: str, pieces: dict[str, list[float]] | None) -> float:
    start = time.perf_counter()
    if pieces is None:
        fss.store_sqlite_file(state, INTEGRATION, helper, "log",
                              threads=fss.sorter_threads(fss.usable_cpus()))
    else:  # the same statements, the commit timed apart
        db = sqlite3.connect(state, isolation_level=None)
        fss.tune(db.execute)
        db.execute(f"PRAGMA threads={fss.sorter_threads(fss.usable_cpus())}")
        db.execute("ATTACH DATABASE ? AS helper", (helper,))
        db.execute("BEGIN IMMEDIATE")
        db.execute(fss.store_attached_sql("helper", "log"), (INTEGRATION,))
        inserted = time.perf_counter()
        db.execute("COMMIT")
        pieces.setdefault("insert", []).append(inserted - start)
        pieces.setdefault("commit", []).append(time.perf_counter() - inserted)
        db.close()
    return time.perf_counter() - start


def store_said(state: str, helper: str) -> tuple[float, float]:
    """The helper's store as it runs now (`committed`: the run goes on at the commit, the
    WAL's copy follows): (seconds to the commit, seconds with the copy)."""
    with run_connection(state):
        start = time.perf_counter()
        said: list[float] = []
        fss.store_sqlite_file(state, INTEGRATION, helper, "log",
                              threads=fss.sorter_threads(fss.usable_cpus()),
                              committed=lambda _: said.append(time.perf_counter()))
        return said[0] - start, time.perf_counter() - start


def with_log(state: str, helper: str, in_pass: bool) -> float:
    """The end with the run's deltas still logged: its fold then the store, or the store
    taking them in its pass (`in_pass`); the run's connection open meanwhile."""
    with run_connection(state):
        start = time.perf_counter()
        if not in_pass:
            store = StateStore.from_url(f"sqlite:///{state}")
            store.fold_fields(INTEGRATION)
            store.engine.dispose()
        fss.store_sqlite_file(state, INTEGRATION, helper, "log", with_log=in_pass,
                              threads=fss.sorter_threads(fss.usable_cpus()))
        return time.perf_counter() - start


def deferred(state: str, helper: str) -> tuple[float, float]:
    """The `deferred` design: (the end's append to the log, the next open's fold), seconds."""
    with run_connection(state):
        start = time.perf_counter()
        db = sqlite3.connect(state, isolation_level=None)
        fss.tune(db.execute)
        db.execute("ATTACH DATABASE ? AS helper", (helper,))
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO engage_field_log (integration, user_key, fresh, digests) "
                   "SELECT ?, user_key, 1, digests FROM helper.log ORDER BY rowid",
                   (INTEGRATION,))
        db.execute("COMMIT")
        db.close()
        appended = time.perf_counter() - start
    store = StateStore.from_url(f"sqlite:///{state}")
    start = time.perf_counter()
    store.fold_fields(INTEGRATION)
    folded = time.perf_counter() - start
    store.engine.dispose()
    return appended, folded


def _median_of(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({' / '.join(f'{v:.2f}' for v in values)})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--attributes", type=int, default=5)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--folded", type=int, default=20_000)
    p.add_argument("--others", type=int, default=200_000)
    args = p.parse_args()
    rnd = random.Random(1)
    size = 12 * args.attributes

    def records(n: int) -> list[tuple[bytes, bytes]]:
        return [(rnd.randbytes(16), rnd.randbytes(size)) for _ in range(n)]

    work = tempfile.mkdtemp(prefix="helper-store-")
    try:
        recs = records(args.rows)
        plain, keyed = f"{work}/plain.db", f"{work}/keyed.db"
        appends = {"append, as the helper does": helper_file(plain, recs, keyed=False),
                   "append in key order (WITHOUT ROWID)": helper_file(keyed, recs, keyed=True)}
        folded, others = records(args.folded), records(2 * args.others)

        def fold(db: sqlite3.Connection) -> None:
            db.executemany("INSERT INTO engage_fields VALUES (?, ?, ?)",
                           [(INTEGRATION, k, d) for k, d in folded])

        def logged(db: sqlite3.Connection) -> None:
            db.executemany("INSERT INTO engage_field_log (integration, user_key, fresh, "
                           "digests) VALUES (?, ?, 1, ?)",
                           [(INTEGRATION, k, d) for k, d in folded])

        def around(db: sqlite3.Connection) -> None:
            for name, part in (("a_before", others[:args.others]),
                               ("z_after", others[args.others:])):
                db.executemany("INSERT INTO engage_fields VALUES (?, ?, ?)",
                               [(name, k, d) for k, d in part])

        cases: dict[str, tuple[Callable[[sqlite3.Connection], None], str]] = {
            "fresh": (lambda db: None, plain),
            f"after a fold of {args.folded:,}": (fold, plain),
            f"among others ({args.others:,} each)": (around, plain),
            "sorted source, fresh": (lambda db: None, keyed),
        }
        took: dict[str, list[float]] = {name: [] for name in cases}
        pieces: dict[str, list[float]] = {}
        later: dict[str, list[float]] = {"appended to the log": [], "the next open's fold": []}
        ends = {f"the run's {args.folded:,} logged, folded first": False,
                f"the run's {args.folded:,} logged, in the pass": True}
        ended: dict[str, list[float]] = {name: [] for name in ends}
        pages = {f"{PAGE_SIZE // 1024} KB pages (a file this release makes)": None,
                 "4 KB pages (a file made before)": 4096}
        said: dict[str, list[tuple[float, float]]] = {name: [] for name in pages}
        for _ in range(args.runs):  # alternating, so that every case sees the same machine
            for name, page_size in pages.items():
                said[name].append(store_said(state_file(work, lambda db: None, page_size),
                                             plain))
            for name, (fill, helper) in cases.items():
                took[name].append(store(state_file(work, fill), helper))
            for name, in_pass in ends.items():
                ended[name].append(with_log(state_file(work, logged), plain, in_pass))
            store(state_file(work, lambda db: None), plain, pieces)
            for name, value in zip(later, deferred(state_file(work, lambda db: None), plain),
                                   strict=True):
                later[name].append(value)
        print(f"{args.rows:,} records of {args.attributes} attributes, medians of {args.runs}:")
        for name, cpu in appends.items():
            print(f"  {name}: {cpu:.2f} CPU s over the run")
        for name, values in took.items():
            print(f"  store, {name}: {_median_of(values)}")
        for name, pairs in said.items():
            commits, totals = [p[0] for p in pairs], [p[1] for p in pairs]
            print(f"  store as the helper runs it, fresh, {name}: the run goes on after "
                  f"{_median_of(commits)}, the WAL copied after {_median_of(totals)}")
        for name, values in ended.items():
            print(f"  end, {name}: {_median_of(values)}")
        for name, values in later.items():
            print(f"  deferred, fresh: {name} {_median_of(values)}")
        sort = statistics.median(took["fresh"]) - statistics.median(
            took["sorted source, fresh"])
        print(f"  pieces of the fresh store: the sort ≈ {sort:.2f} s, the inserts (with it) "
              f"{statistics.median(pieces['insert']):.2f} s, the commit "
              f"{statistics.median(pieces['commit']):.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
