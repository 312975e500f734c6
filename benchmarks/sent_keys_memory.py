"""Memory and time of what a backfill of events holds of the keys incremental runs sent
(`read.sent_rows`), against a set of the keys themselves (what it held before).

A SQLite state file is filled with one incremental run whose journal holds `--keys` event keys
of 21 characters in merged entries (as a compacted run leaves them: `MERGED_KEYS_CHARS` of
keys each). Each way is then built from that journal in its own process, which reports its
peak RSS above what it had before the build, the build's wall seconds, and the wall of
asking for `--asked` keys (half of them sent) in batches of 5,000 (the reader asks one
extracted batch at a time).

    .venv/bin/python benchmarks/sent_keys_memory.py [--keys 5000000] [--asked 1000000]
        [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from engage_sync.state.journal import MERGED_KEYS_CHARS
from engage_sync.state.schema import journal
from engage_sync.state.store import StateStore

BATCH = 5000
MODES = ("incremental", "full_resync", "retry")


def key(n: int) -> str:
    return f"EVENT_ID=ev-{n:09d}"


def fill(path: str, keys: int) -> None:
    store = StateStore.from_url(f"sqlite:///{path}")
    run = store.open_run("bench", "incremental", None, None)
    per_entry = MERGED_KEYS_CHARS // 24  # "EVENT_ID=ev-000000000", quoted, and a comma, as
    # the compaction writes them (json.dumps adds a space: 25 here)
    with store.engine.begin() as conn:
        for req, first in enumerate(range(0, keys, per_entry), start=1):
            ks = [key(n) for n in range(first, min(first + per_entry, keys))]
            conn.execute(journal.insert().values(
                run_id=run, req_no=req, start_cursor=None, end_cursor=json.dumps([first]),
                state="acked", item_count=len(ks), synced=len(ks), item_keys=json.dumps(ks)))
    store.engine.dispose()


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(path: str, way: str, keys: int, asked: int) -> dict[str, float]:
    from engage_sync.read.sent_rows import SentRows

    store = StateStore.from_url(f"sqlite:///{path}")
    before = rss_mb()
    start = time.perf_counter()
    if way == "set of keys":  # as before: every entry's keys parsed at once, then a set
        held = frozenset(k for _, _, ks in store.settled_ranges("bench", MODES) for k in ks)

        def ask(batch: list[str]) -> list[bool]:
            return [k in held for k in batch]
    else:
        sent = SentRows.from_entries(store.settled_entries("bench", MODES))

        def ask(batch: list[str]) -> list[bool]:
            return sent.contains_many([((), k) for k in batch])
    built = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    questions = [key(n if n % 2 else keys + n) for n in range(asked)]  # half of them sent
    start = time.perf_counter()
    hits = sum(sum(ask(questions[i:i + BATCH])) for i in range(0, asked, BATCH))
    return {"peak_mb": peak, "build_s": built, "ask_s": time.perf_counter() - start,
            "hits": hits}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=5_000_000)
    p.add_argument("--asked", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--child", nargs=2, metavar=("STATE", "WAY"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.keys, args.asked)))
        return
    folder = tempfile.mkdtemp(prefix="sent-keys-")
    path = f"{folder}/state.db"
    fill(path, args.keys)
    ways = ("set of keys", "hashes")
    results: dict[str, list[dict[str, float]]] = {w: [] for w in ways}
    for _ in range(args.runs):  # alternating
        for way in ways:
            command = [sys.executable, __file__, "--keys", str(args.keys), "--asked",
                       str(args.asked), "--child", path, way]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results[way].append(json.loads(out))
    shutil.rmtree(folder)
    print(f"{args.keys:,} keys sent, {args.asked:,} asked, medians of {args.runs}:")
    for way, runs in results.items():
        med = {m: statistics.median(r[m] for r in runs) for m in ("peak_mb", "build_s",
                                                                   "ask_s")}
        print(f"  {way}: peak +{med['peak_mb']:.0f} MiB ({med['peak_mb'] * 2**20 / args.keys:.0f}"
              f" bytes a key), built in {med['build_s']:.2f} s, asked in {med['ask_s']:.2f} s"
              f" ({runs[0]['hits']:,.0f} found)")


if __name__ == "__main__":
    main()
