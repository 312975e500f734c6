"""A first diffed run's field record, digested and kept by a helper process.

A run that opens on an empty record (`diffing.Differ.blank`) sends every object whole, so its
diff does not change what is sent: it only computes every attribute's digest and records it
once the service acknowledged the object. That work (the digests, then the log and its sort
at the fold) would nearly double the CPU of the thread that reads and packs
(`benchmarks/diff_throughput.py`, figures in benchmarks/README.md). A helper process does it
on another core: after each settle the run hands it the objects the service acknowledged, in
settle order; the helper digests them and appends
them to a private SQLite file (appending needs only a few pages of cache, where keeping each
user's record in key order as it came needed the whole table's); at the run's end the helper
writes them over the integration's record in one transaction, sorted by user in SQLite as they
are read (a user's last record wins). The run folds its own log before that, or, on a SQLite
file (`takes_log`; `field_store_sql`), the helper's pass takes the run's fresh deltas with its
records and the run folds what is left after it (the unknowns of objects in doubt).

Invariants:
- started only by an unpartitioned run on an empty record whose state database another
  process can open (a file or a server, `shareable_url`), after `after` items;
- it is handed only objects whose acknowledgement is settled, in settle order, so its record
  of a user is the one the service holds after this run (a later object of a user replaces an
  earlier one: it was acknowledged later), and never a user whose digests the run logged
  itself (`diff.stage`: those users' later objects are logged by the run); and the users
  whose objects ended in doubt (`forget`), of whom it records nothing handed before;
- it writes to the state database once, after `finish` (so after the run's last settle, and
  the run's own fold or, `takes_log`, with the run's fresh deltas: their users are none of
  its own, so the order makes no difference), says `STORED` on its standard output once that
  is committed, and then, on a SQLite file, copies the WAL into the file while the run
  closes its row (the run's `stop` waits for its end); a run that ends any other way (killed,
  failed) records nothing of what the helper kept: a helper whose input ends without
  `finish` deletes its file and exits, and those users are sent whole the next time they
  are read;
- the state URL reaches the helper on its standard input, never on its command line, and its
  password never appears in an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import orjson

from engage_sync.cpu_affinity import place_child, release_child
from engage_sync.errors import ConfigError, SyncError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

log = logging.getLogger("engage_sync.diff.helper")

AFTER = 20_000
"""Items a first diffed run digests itself before it starts the helper (a process's start-up,
on another core, costs more than a small run saves, and the run would wait for it at its end)."""
ENV = "ENGAGE_SYNC_FIELD_HELPER_AFTER"
QUEUED = 64  # settles' worth of objects waiting for the pipe before `hand` blocks
CACHE_KIB = 2_048  # the helper's SQLite page cache while it appends (SQLite's default):
# appends in rowid order touch few pages, so a larger cache saves no CPU and only holds memory
# while the run sends
LOG = "log"  # records as they come, in settle order (rowid)
NICE = 19  # the helper yields a busy core to the run (the run's end waits for what it left)
FINISH = "finish"
FORGET = "forget"  # a frame of users to forget: {FORGET: [user key, ...]}
GONE = "gone"  # user key → the last row of `LOG` forgotten for it
_LEN = 4
_JOINED = b"\x00"  # a joined frame's first byte (a pickle's is 0x80)
STORED = b"stored\n"  # the helper's one line on standard output: the record is committed


def helper_after(environ: Mapping[str, str]) -> int | None:
    """Items before a first diffed run starts its helper, from ENGAGE_SYNC_FIELD_HELPER_AFTER
    (default `AFTER`; `off`: never, the run digests everything itself)."""
    text = environ.get(ENV, "").strip().lower()
    if not text:
        return AFTER
    if text == "off":
        return None
    if text.isdigit():
        return int(text)
    raise ConfigError("must be a whole number of items or `off`", key=ENV)


def shareable_url(engine: Engine) -> str | None:
    """The state database's URL if another process can open the same database (not an
    in-memory SQLite database), else None."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        return None
    return url.render_as_string(hide_password=False)


def sqlite_file(engine: Engine) -> str | None:
    """The state database's file when the helper may write it with the standard library
    alone: a SQLite file named by a URL with no options; else None (it uses the state store)."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or url.get_driver_name() != "pysqlite" \
            or url.query or shareable_url(engine) is None:
        return None
    return url.database


class FieldHelper:
    """The run's side: a helper process, fed through its standard input by a writer thread
    (so a settle waits for the helper only when `QUEUED` settles are waiting)."""

    def __init__(self, integration: str, state_url: str, state_file: str | None = None) -> None:
        from sqlalchemy.engine import make_url

        self.integration = integration
        self.takes_log = state_file is not None
        """Its write takes the integration's fresh logged deltas too (a SQLite file)."""
        self._secret = make_url(state_url).password
        self._err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by `stop`
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "engage_sync.diff.helper"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._err, close_fds=True)
        place_child(self._proc.pid)  # off the run's CPU when it is pinned (cpu_affinity)
        self.handed = 0  # objects handed so far
        self._stored = False  # `finish` saw the records committed
        self._queue: queue.Queue[Any] = queue.Queue(QUEUED)
        self._broken: BaseException | None = None
        self._writer = threading.Thread(target=self._write, name=f"field-helper-{integration}",
                                        daemon=True)
        self._put({"url": state_url, "integration": integration, "file": state_file})
        self._writer.start()

    def hand(self, users: list[str], blobs: list[bytes]) -> None:
        """Objects whose acknowledgement was just settled (each user reference and its JSON
        object), in settle order. Raises SyncError if the helper stopped."""
        if users:
            self._enqueue(frame(users, blobs))
            self.handed += len(users)

    def forget(self, keys: list[bytes]) -> None:
        """Users (their keys) whose objects ended in doubt, after the objects handed before:
        what the helper kept of them so far is not recorded (those handed later are)."""
        if keys:
            self._enqueue(pickle.dumps({FORGET: keys}, protocol=5))

    def finish(self) -> None:
        """After the run's last settle (and its fold, unless `takes_log`): returns once the
        helper has committed its records; it may go on copying the state file's WAL into the
        file (`stop` waits for that). Raises SyncError if it failed (then nothing of its
        records was written, and the log keeps what it would have taken)."""
        release_child(self._proc.pid)  # the run waits for it now: its sort may use every CPU
        self._enqueue(FINISH)
        self._enqueue(None)
        self._writer.join()
        assert self._proc.stdout is not None
        said = b""
        while said != STORED and (said := self._proc.stdout.readline()):
            pass  # a library's stray line is passed over; the end of the output is a failure
        if said != STORED or self._broken is not None:
            self._proc.wait()
            self._fail()
        self._stored = True

    def _reap(self) -> None:
        """After `finish`: wait for the helper's end. A helper that fails after its records
        were committed (its copy of the WAL) loses nothing: SQLite copies the WAL at a later
        commit; that is said as a warning."""
        code = self._proc.wait()
        if code != 0:
            log.warning("integration %s: the field record is written, but the helper then "
                        "failed (exit status %s: %s); its copy into the state file is left "
                        "to the next writer", self.integration, code, self._tail())
        self._close_pipes()

    def stop(self) -> None:
        """The run ended another way: the helper records nothing (after `finish`: the same
        as `_reap`). The writer thread ends too, closing the pipe."""
        if self._stored:
            self._reap()
            return
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        # a full queue: the writer is failing on the closed pipe and ends by itself
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._close_pipes()

    def _close_pipes(self) -> None:
        if not self._err.closed:
            self._err.close()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def _put(self, obj: Any) -> None:
        assert self._proc.stdin is not None
        data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=5)
        self._proc.stdin.write(len(data).to_bytes(_LEN, "little") + data)
        self._proc.stdin.flush()

    def _write(self) -> None:
        """The writer thread: frames to the pipe until None; the pipe is closed however the
        thread ends (a helper killed mid-write breaks the pipe under it)."""
        assert self._proc.stdin is not None
        try:
            while (obj := self._queue.get()) is not None:
                self._put(obj)
        except BaseException as exc:  # reported by `hand` and `finish`
            self._broken = exc
        finally:
            with contextlib.suppress(OSError):  # a broken pipe may refuse its last flush
                self._proc.stdin.close()

    def _enqueue(self, obj: Any) -> None:
        """Queue for the writer; while the queue is full, check that the helper still runs."""
        while True:
            if self._broken is not None or (obj is not None and self._proc.poll() is not None):
                self._fail()
            try:
                self._queue.put(obj, timeout=0.5)
                return
            except queue.Full:
                continue

    def _tail(self) -> str:
        """The end of what the helper wrote on standard error, its password masked."""
        if self._err.closed:
            return "no message"
        self._err.seek(0)
        tail = self._err.read()[-2000:].decode("utf-8", "replace").strip()
        if self._secret:
            tail = tail.replace(str(self._secret), "***")
        return tail or "no message"

    def _fail(self) -> None:
        code = self._proc.poll()
        tail = self._tail()
        self.stop()
        raise SyncError(f"integration {self.integration}: the process that records the "
                        f"fields the service acknowledged failed (exit status {code}: "
                        f"{tail}); the next run sends this run's users whole")


def frame(users: list[str], blobs: list[bytes]) -> bytes:
    """Users and their JSON objects as one frame: the users joined by newlines (their length
    first), then the objects as one JSON array; pickled instead if a user reference holds a
    newline. A third of the cost of pickling them, on the run's busiest thread, and the
    helper parses the objects in one call."""
    names = "\n".join(users)
    if names.count("\n") != len(users) - 1:
        return pickle.dumps((users, [orjson.loads(b) for b in blobs]), protocol=5)
    head = names.encode("utf-8")
    return b"".join((_JOINED, len(head).to_bytes(_LEN, "little"), head, b"[",
                     b",".join(blobs), b"]"))


def _unframe(data: bytes) -> Any:
    """A frame → (users, objects parsed), or what was pickled (the header, `FINISH`, a
    {`FORGET`: keys} dict)."""
    if not data.startswith(_JOINED):
        return pickle.loads(data)
    size = int.from_bytes(data[1:1 + _LEN], "little")
    start = 1 + _LEN
    users = data[start:start + size].decode("utf-8").split("\n")
    return users, orjson.loads(data[start + size:])


# the helper process -------------------------------------------------------------------------
def _frames(stream: IO[bytes]) -> Iterator[Any]:
    """The frames on `stream` until its end; a frame cut short (the run was killed while
    writing it) ends them too."""
    while len(head := stream.read(_LEN)) == _LEN:
        size = int.from_bytes(head, "little")
        data = stream.read(size)
        if len(data) < size:
            return
        yield _unframe(data)


def records(users: Sequence[str], objs: Sequence[dict[str, Any]]) -> list[tuple[bytes, bytes]]:
    """Users and the objects sent whole to them → (user key, encoded record) pairs."""
    from engage_sync.diff.field_diff import whole_encoded_object
    from engage_sync.state.field_codec import user_key

    return [(user_key(user), whole_encoded_object(user, obj))
            for user, obj in zip(users, objs, strict=True)]


def _keep(path: str) -> sqlite3.Connection:
    """The helper's private file: no journal and no syncs (it is thrown away on any failure),
    a small cache, records appended in the order they came."""
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode=OFF", "synchronous=OFF", f"cache_size=-{CACHE_KIB}"):
        db.execute(f"PRAGMA {pragma}")
    db.execute(f"CREATE TABLE {LOG} (user_key BLOB NOT NULL, digests BLOB NOT NULL)")
    db.execute(f"CREATE TABLE {GONE} (user_key BLOB PRIMARY KEY, last INTEGER NOT NULL) "
               "WITHOUT ROWID")
    return db


def _forget(db: sqlite3.Connection, keys: list[bytes]) -> None:
    """These users' rows so far are not to be recorded."""
    db.executemany(f"INSERT INTO {GONE} SELECT ?, coalesce(max(rowid), 0) FROM {LOG} WHERE true "
                   "ON CONFLICT (user_key) DO UPDATE SET last = excluded.last",
                   [(k,) for k in keys])


def _drop_forgotten(db: sqlite3.Connection) -> None:
    """Before the store: the rows forgotten go (one pass over the log, a probe of `GONE` a
    row; only run when something was forgotten)."""
    db.execute(f"DELETE FROM {LOG} WHERE EXISTS (SELECT 1 FROM {GONE} g WHERE g.user_key = "
               f"{LOG}.user_key AND g.last >= {LOG}.rowid)")


def main() -> int:
    """The helper's whole life; an error is one line on standard error, for the run."""
    try:
        return _serve()
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1


def _serve() -> int:
    os.nice(NICE)
    frames = _frames(sys.stdin.buffer)
    header = next(frames)
    fd, path = tempfile.mkstemp(prefix="engage-fields-", suffix=".db")
    os.close(fd)
    try:
        db = _keep(path)
        db.execute("BEGIN")  # one transaction: pages stay in the cache, written once
        forgot = False
        try:
            for frame in frames:
                if frame == FINISH:
                    if forgot:
                        _drop_forgotten(db)
                    db.execute("COMMIT")
                    db.close()
                    _store(header, path, _say_stored)
                    return 0
                if isinstance(frame, dict):
                    _forget(db, frame[FORGET])
                    forgot = True
                else:
                    db.executemany(f"INSERT INTO {LOG} VALUES (?, ?)", records(*frame))
        finally:
            db.close()
        return 0  # the input ended without `finish`: the run stopped, nothing is recorded
    finally:
        os.unlink(path)


def _say_stored(written: int) -> None:
    """Tell the run that the record is committed (`STORED`, on standard output)."""
    sys.stdout.buffer.write(STORED)
    sys.stdout.buffer.flush()


def _store(header: dict[str, Any], path: str, stored: Callable[[int], None]) -> None:
    """The records kept in `path` over the integration's record; `stored` once they are
    committed. The state database is opened only now: until its end the helper holds no
    SQLAlchemy (whose memory it would hold the whole run; the run itself has the same
    database open, so the URL is known to work), and a SQLite file is written with the
    standard library alone (`field_store_sql`), which then copies its WAL into the file while
    the run ends."""
    if header.get("file"):
        from engage_sync.state.field_store_sql import (
            sorter_threads,
            store_sqlite_file,
            usable_cpus,
        )

        # every CPU of the run's by now (`release_child`)
        store_sqlite_file(header["file"], header["integration"], path, LOG,
                          threads=sorter_threads(usable_cpus()), with_log=True,
                          committed=stored)
        return
    from engage_sync.state.store import StateStore

    state = StateStore.from_url(header["url"])
    try:
        stored(state.store_field_file(header["integration"], path, LOG))
    finally:
        state.engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
