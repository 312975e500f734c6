"""The disk a first diffed run's end needs: the field helper's file, then its store into a
SQLite state file (`field_store_sql.store_sqlite_file`, as the helper runs it), measured at
N users (records of `--attributes` attributes, as `helper_store.py` builds them).

Reports, in bytes a user: the helper's file as the run leaves it; the state file's growth;
its WAL at the store's commit (SQLite keeps the WAL at that size until the last connection
closes: the run's, at its end); and the peak of the free space lost on the file system that
holds the state file and the temporary folder while the store runs (sampled every 20 ms with
`statvfs`: the WAL, the state file's growth and SQLite's sort files, which are unlinked at
creation and so seen only there). Both on one file system here; run it where it is not shared
with other writers.

    .venv/bin/python benchmarks/first_load_disk.py [--rows 5000000] [--attributes 5]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import threading
import time

from helper_store import INTEGRATION, helper_file, run_connection, state_file

from engage_sync.state import field_store_sql as fss


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--attributes", type=int, default=5)
    args = p.parse_args()
    rnd = random.Random(1)
    size = 12 * args.attributes
    work = tempfile.mkdtemp(prefix="first-load-disk-")
    try:
        helper = f"{work}/helper.db"
        helper_file(helper, [(rnd.randbytes(16), rnd.randbytes(size))
                             for _ in range(args.rows)], keyed=False)
        state = state_file(work, lambda db: None)
        before = os.path.getsize(state)
        wal = state + "-wal"
        lowest, done = free_bytes(work), threading.Event()
        start_free = lowest
        peak_wal = 0

        def sample() -> None:
            nonlocal lowest, peak_wal
            while not done.is_set():
                lowest = min(lowest, free_bytes(work))
                if os.path.exists(wal):
                    peak_wal = max(peak_wal, os.path.getsize(wal))
                time.sleep(0.02)

        with run_connection(state):  # the WAL stays until the run's connection closes
            watcher = threading.Thread(target=sample)
            watcher.start()
            began = time.perf_counter()
            fss.store_sqlite_file(state, INTEGRATION, helper, "log",
                                  threads=fss.sorter_threads(fss.usable_cpus()))
            took = time.perf_counter() - began
            done.set()
            watcher.join()
            grown = os.path.getsize(state) - before
            at_commit = os.path.getsize(wal) if os.path.exists(wal) else 0
        n = args.rows
        print(f"{n:,} users of {args.attributes} attributes; the store took {took:.1f} s")
        for name, value in (("the helper's file", os.path.getsize(helper)),
                            ("the state file's growth", grown),
                            ("its WAL after the commit", max(at_commit, peak_wal)),
                            ("free space lost at the peak", start_free - lowest)):
            print(f"  {name}: {value / 2**20:,.0f} MiB ({value / n:.0f} bytes a user)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
