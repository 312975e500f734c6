"""A first diffed run's helper process (`field_helper`) on SQLite and PostgreSQL state
databases: what it is handed is recorded only once the run finishes, over what the run logged
itself; a run that stops without finishing records nothing of it; its errors name the
integration without the state database's password."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engage_sync.diff import field_diff
from engage_sync.diff.helper import FieldHelper, frame, shareable_url, sqlite_file
from engage_sync.diff.helper import _unframe as unframe
from engage_sync.diff.stage import Differ
from engage_sync.errors import SyncError
from engage_sync.items import UNCHANGED, Item
from engage_sync.state import field_codec
from engage_sync.state import fields as field_record
from engage_sync.state.store import StateStore
from tests.integration.conftest import field_records, logged_deltas

INTEGRATION = "users"


@pytest.fixture
def store(state_both: StateStore) -> StateStore:
    return state_both


def _item(n: int, plan: str) -> Item:
    blob = json.dumps({"external_id": f"u{n}", "plan": plan, "n": n}).encode()
    return Item(n, f"u{n}", f"external_id:u{n}", "attributes", blob, (), 2)


def _record(state: StateStore) -> dict[bytes, dict[int, int]]:
    return field_records(state, INTEGRATION)


def _logged(state: StateStore) -> int:
    return logged_deltas(state, INTEGRATION)


def _helper(store: StateStore) -> FieldHelper:
    url = shareable_url(store.engine)
    assert url is not None
    return FieldHelper(INTEGRATION, url, sqlite_file(store.engine))  # as `diff.stage` does


def _whole(item: Item) -> dict[int, int]:
    return field_codec.decode(field_diff.whole_encoded(item.user, item.blob))


def _hand(helper: FieldHelper, items: list[Item]) -> None:
    helper.hand([i.user for i in items], [i.blob for i in items])


def _split(store: StateStore, first: list[Any], rest: list[Any],
           start: Callable[[], FieldHelper] | None = None) -> Differ:
    """A first run's Differ whose helper (`start`, default `_helper`) starts after one item,
    opened: `first` (one item) is digested by the run, `rest` is for the helper (both
    rewritten in place)."""
    differ = Differ(INTEGRATION, store, start_helper=start or (lambda: _helper(store)),
                    helper_after=1)
    differ.open()
    differ.apply(first)
    differ.apply(rest)
    return differ


def _leftovers() -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob("engage-fields-*.db"))


def test_a_first_run_hands_its_objects_to_the_helper_and_records_them_at_close(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The first item is digested in the run (helper after 1 item) and logged; the others
    carry no digests and go to the helper once acknowledged, but a later object of the user
    the run digested is digested and logged by the run too. At close the run folds its log,
    then the helper writes its records: each user's object acknowledged last wins."""
    first: list[Any] = [_item(0, "free")]
    rest: list[Any] = [_item(n, "free") for n in (1, 2)]
    differ = _split(store, first, rest)
    items = first + rest
    assert items[0].fields[:1] == field_record.FRESH
    assert not items[1].fields and not items[2].fields and differ.helper is not None
    assert [i.points for i in items] == [2, 2, 2]  # billed as packed
    store.settle("r1", INTEGRATION, [], acked_fields=[(items[0].user, items[0].fields)])
    differ.acked(items)  # the one digested here is not handed again
    later: list[Any] = [_item(0, "gold"), _item(1, "gold")]  # acknowledged later: they win
    differ.apply(later)
    assert later[0].fields[:1] == field_record.FRESH and not later[1].fields
    store.settle("r2", INTEGRATION, [], acked_fields=[(later[0].user, later[0].fields)])
    differ.acked(later)
    assert _record(store) == {}  # nothing of the helper's before the run's end
    with caplog.at_level(logging.INFO, logger="engage_sync.diff.stage"):
        differ.close()
    waits = [r.getMessage() for r in caplog.records if "the run ends once" in r.getMessage()]
    assert waits == [f"integration {INTEGRATION}: every request answered; the run ends once "
                     "the helper has written the field record of the 3 objects it was handed"]
    said = [r.getMessage() for r in caplog.records if "the helper wrote" in r.getMessage()]
    assert len(said) == 1 and re.fullmatch(
        f"integration {INTEGRATION}: the helper wrote the field record of this first run in "
        r"\d+\.\d\d s", said[0]), said
    assert _logged(store) == 0 and differ.helper is None
    want = {field_codec.user_key(i.user): _whole(i) for i in (later[0], later[1], items[2])}
    assert _record(store) == want
    assert all(_whole(i) for i in later) and _whole(later[0]) != _whole(items[0])
    ending = differ.ending  # it may be copying the state file's WAL still: `stop` waits
    assert ending is not None
    differ.stop()
    assert differ.ending is None and ending._proc.returncode == 0


def test_a_run_that_stops_records_nothing_the_helper_kept(store: StateStore) -> None:
    """The run failed or was killed: what the helper was handed is not recorded (those users
    are sent whole next time), what the run logged itself is, and no file is left behind."""
    before = set(_leftovers())
    first: list[Any] = [_item(1, "free")]
    rest: list[Any] = [_item(2, "free")]
    differ = _split(store, first, rest)
    items = first + rest
    store.settle("r1", INTEGRATION, [], acked_fields=[(items[0].user, items[0].fields)])
    differ.acked(items)
    helper = differ.helper
    assert helper is not None
    differ.stop()  # the run's `finally` after an error
    helper._writer.join(10)
    assert not helper._writer.is_alive() and helper._proc.stdin.closed  # type: ignore[union-attr]
    store.fold_fields(INTEGRATION)  # the next run's open
    assert _record(store) == {field_codec.user_key(items[0].user): _whole(items[0])}
    assert set(_leftovers()) <= before


def test_a_run_that_stops_leaves_no_user_recorded_older_than_the_service_holds(
    store: StateStore
) -> None:
    """A user the run digested before its helper started comes again after it: its later
    object is logged by the run, not handed to the helper. So when the run stops (killed, or
    its helper failed) the record holds that user's later object, which the service holds,
    and not the earlier one; a user only the helper had has no record (sent whole next
    time)."""
    differ = Differ(INTEGRATION, store, start_helper=lambda: _helper(store), helper_after=1)
    differ.open()
    first: list[Any] = [_item(1, "free")]
    differ.apply(first)
    store.settle("r1", INTEGRATION, [], acked_fields=[(first[0].user, first[0].fields)])
    differ.acked(first)
    later: list[Any] = [_item(1, "gold"), _item(2, "gold")]
    differ.apply(later)  # the helper starts here
    assert differ.helper is not None
    assert later[0].fields[:1] == field_record.FRESH and not later[1].fields
    store.settle("r2", INTEGRATION, [], acked_fields=[(later[0].user, later[0].fields)])
    differ.acked(later)
    assert differ.helper.handed == 1
    differ.stop()
    store.fold_fields(INTEGRATION)  # the next run's open
    assert _record(store) == {field_codec.user_key(later[0].user): _whole(later[0])}
    assert _whole(later[0]) != _whole(first[0])


def test_an_object_in_doubt_leaves_its_user_unrecorded_by_the_helper(
    store: StateStore
) -> None:
    """A user the helper kept (its first object acknowledged) whose later object ends in
    doubt: the service may hold either, so the helper records nothing of it and the next run
    sends it whole, a NULL too. A user forgotten so, then acknowledged again, is recorded with
    that later object. Before, the helper kept the first object: a change back to it was never
    sent."""
    differ = Differ(INTEGRATION, store, start_helper=lambda: _helper(store), helper_after=0)
    differ.open()
    first: list[Any] = [_item(1, "free"), _item(2, "free"), _item(3, "free")]
    differ.apply(first)
    assert differ.helper is not None and not any(i.fields for i in first)
    differ.settled(first, [], first)
    doubted: list[Any] = [_item(1, "gold"), _item(3, "gold")]
    differ.apply(doubted)
    differ.settled([], doubted, doubted)  # their request ended in doubt
    again: list[Any] = [_item(3, "silver")]
    differ.apply(again)
    differ.settled(again, [], again)
    differ.close()
    assert _record(store) == {field_codec.user_key(first[1].user): _whole(first[1]),
                              field_codec.user_key(again[0].user): _whole(again[0])}
    nulls = json.dumps({"external_id": "u1", "plan": None, "n": 1}).encode()
    back: list[Any] = [Item(1, "u1", "external_id:u1", "attributes", nulls, (), 2),
                       _item(2, "free")]
    following = Differ(INTEGRATION, store)
    following.open()
    following.apply(back)
    assert back[1] is UNCHANGED
    assert json.loads(back[0].blob) == {"external_id": "u1", "plan": None, "n": 1}


def test_a_helper_whose_run_died_writes_nothing_and_removes_its_file(store: StateStore) -> None:
    """The run's process died: the helper's input ends without `finish`; it exits 0 having
    written nothing."""
    before = set(_leftovers())
    helper = _helper(store)
    _hand(helper, [_item(1, "free")])
    helper._queue.put(None)  # the input ends, as when the run's process is killed
    helper._writer.join()
    assert helper._proc.wait(30) == 0
    assert _record(store) == {} and set(_leftovers()) <= before


def test_a_helper_that_cannot_open_the_state_database_fails_without_its_password() -> None:
    """The helper's error reaches the run, naming the integration; the URL's password, given
    to the helper on its standard input, appears nowhere in it."""
    helper = FieldHelper(INTEGRATION, "postgresql+psycopg://sync:s3cret-pw@127.0.0.1:9/state")
    with pytest.raises(SyncError) as error:
        _hand(helper, [_item(1, "free")])
        time.sleep(0.2)
        helper.finish()
    text = str(error.value)
    assert "integration users" in text and "exit status 1" in text
    assert "s3cret-pw" not in text
    assert "StateUnavailable: the state database at 127.0.0.1:9 is unreachable" in text


def test_frames_carry_any_user_reference() -> None:
    """Joined frames, and pickled ones for a user reference holding a newline."""
    blobs = [b'{"external_id":"a","x":"\\n,]"}', b'{"external_id":"b\\u00e9"}']
    objs = [{"external_id": "a", "x": "\n,]"}, {"external_id": "b\u00e9"}]
    for users in (["external_id:a", "external_id:b\u00e9"], ["external_id:a\n", "x:b"]):
        assert unframe(frame(users, blobs)) == (users, objs)
    assert frame(["a"], [b"{}"])[:1] == b"\x00"


def test_an_in_memory_state_database_keeps_the_digests_in_the_run() -> None:
    assert shareable_url(StateStore.from_url("sqlite://").engine) is None


def test_the_helper_process_holds_no_sqlalchemy_until_its_end() -> None:
    """The helper's module imports neither SQLAlchemy nor the state store: they are loaded
    only to write the records at the run's end (≈ 60 MB less for the whole run)."""
    probe = ("import sys, engage_sync.diff.helper; "
             "print(sorted(m for m in ('sqlalchemy', 'engage_sync.state.store') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_on_a_sqlite_file_the_helper_writes_without_sqlalchemy(tmp_path: Path) -> None:
    """The helper's end on a SQLite state file: the standard library's sqlite3 writes its
    records (the same statement the state store runs), and SQLAlchemy is never loaded."""
    state = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    assert sqlite_file(state.engine) == str(tmp_path / "state.db")
    items = [_item(1, "a"), _item(2, "b"), _item(1, "c")]
    log = tmp_path / "log.db"
    probe = (
        "import sqlite3, sys\n"
        "from engage_sync.diff import helper\n"
        "from engage_sync.diff.helper import records\n"
        f"db = sqlite3.connect({str(log)!r})\n"
        "db.execute(f'CREATE TABLE {helper.LOG} (user_key BLOB NOT NULL, digests BLOB NOT NULL)')\n"
        f"users, objs = {[i.user for i in items]!r}, {[json.loads(i.blob) for i in items]!r}\n"
        "db.executemany(f'INSERT INTO {helper.LOG} VALUES (?, ?)', records(users, objs))\n"
        "db.commit(); db.close()\n"
        f"helper._store({{'url': 'unused', 'integration': {INTEGRATION!r}, "
        f"'file': {str(tmp_path / 'state.db')!r}}}, {str(log)!r}, "
        "lambda n: print('stored', n))\n"
        "print('sqlalchemy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["stored", "3", "False"]
    assert _record(state) == {field_codec.user_key(i.user): _whole(i) for i in items[1:]}


def test_the_helper_uses_the_state_store_where_sqlite3_alone_would_not_do() -> None:
    assert sqlite_file(StateStore.from_url("sqlite://").engine) is None
    from sqlalchemy import create_engine

    assert sqlite_file(create_engine("postgresql+psycopg://u:p@127.0.0.1:9/db")) is None
    assert sqlite_file(create_engine("sqlite:////tmp/x.db?timeout=5")) is None
    from types import SimpleNamespace

    from sqlalchemy.engine import make_url

    cipher = SimpleNamespace(url=make_url("sqlite+pysqlcipher://:key@//tmp/x.db"))
    assert sqlite_file(cipher) is None  # type: ignore[arg-type]  # only its URL is read
    from engage_sync.state.field_store_sql import FIELDS_TABLE
    from engage_sync.state.schema import fields

    assert fields.name == FIELDS_TABLE


@pytest.mark.parametrize("threads", [0, 3])
def test_the_helpers_records_are_written_the_same_sorted_by_more_threads(
        tmp_path: Path, threads: int) -> None:
    """`store_sqlite_file` with SQLite's sorter on more threads (`sorter_threads`): every
    user's last record wins, over more records than the sorter keeps in memory at once."""
    import os
    import sqlite3

    from engage_sync.state.field_store_sql import FIELDS_TABLE, store_sqlite_file

    state = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    log = tmp_path / "log.db"
    keys = [os.urandom(16) for _ in range(60_000)]
    rows = [(k, os.urandom(60)) for k in keys] + [(k, os.urandom(60)) for k in keys[::3]]
    db = sqlite3.connect(log)
    db.execute("CREATE TABLE log (user_key BLOB NOT NULL, digests BLOB NOT NULL)")
    db.executemany("INSERT INTO log VALUES (?, ?)", rows)
    db.commit()
    db.close()
    written = store_sqlite_file(str(tmp_path / "state.db"), INTEGRATION, str(log), "log",
                                threads=threads)
    with state.engine.connect() as conn:
        got = dict(conn.exec_driver_sql(
            f"SELECT user_key, digests FROM {FIELDS_TABLE} WHERE integration = ?",
            (INTEGRATION,)).all())
    assert written == len(rows) and got == dict(rows)  # a later row of a key wins


def _fields_in_file_alone(state_file: Path, copy: Path) -> int:
    """The field records the database file holds without its WAL (a copy of the file alone:
    what a checkpoint has copied into it)."""
    import shutil
    import sqlite3

    from engage_sync.state.field_store_sql import FIELDS_TABLE

    shutil.copyfile(state_file, copy)
    db = sqlite3.connect(copy)
    try:
        return int(db.execute(f"SELECT count(*) FROM {FIELDS_TABLE}").fetchone()[0])
    finally:
        db.close()


def test_a_helpers_write_is_said_committed_before_its_wal_is_copied_into_the_file(
        tmp_path: Path) -> None:
    """`store_sqlite_file(committed=...)`: when it is called, another connection reads the
    records, but its commit left them in a WAL longer than SQLite's automatic checkpoint
    would have let stand (no checkpoint at the commit: the run goes on meanwhile); when it
    returns, the file itself holds them (the WAL was copied)."""
    import os
    import sqlite3

    from engage_sync.state.field_store_sql import store_sqlite_file
    from engage_sync.state.schema import PAGE_SIZE

    state = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    log = tmp_path / "log.db"
    state.engine.dispose()  # its last connection's close copies the schema into the file
    rows = [(os.urandom(16), os.urandom(1_200)) for _ in range(20_000)]  # ≈ 24 MB
    db = sqlite3.connect(log)
    db.execute("CREATE TABLE log (user_key BLOB NOT NULL, digests BLOB NOT NULL)")
    db.executemany("INSERT INTO log VALUES (?, ?)", rows)
    db.commit()
    db.close()
    seen: list[tuple[int, int, int]] = []

    def committed(written: int) -> None:
        wal_pages = os.path.getsize(tmp_path / "state.db-wal") // PAGE_SIZE
        assert wal_pages > 1_000  # past the automatic checkpoint's 1,000 pages
        seen.append((written, len(_record(state)),
                     _fields_in_file_alone(tmp_path / "state.db", tmp_path / "during.db")))

    written = store_sqlite_file(str(tmp_path / "state.db"), INTEGRATION, str(log), "log",
                                committed=committed)
    assert written == len(rows) and seen == [(len(rows), len(rows), 0)]
    assert _fields_in_file_alone(tmp_path / "state.db", tmp_path / "after.db") == len(rows)


def test_a_sqlite_helpers_write_takes_the_runs_fresh_deltas_in_its_sorted_pass(
        tmp_path: Path) -> None:
    """`store_sqlite_file(with_log=True)`: the integration's fresh logged deltas are written
    with the helper's records (a user's last delta wins, over more deltas than SQLite's
    sorter keeps in memory at once, sorted on more threads) and leave the log in the same
    transaction; its merge deltas, and another integration's deltas, stay for a fold."""
    import os
    import random
    import sqlite3

    from engage_sync.state.field_store_sql import FIELDS_TABLE, store_sqlite_file

    state = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    rnd = random.Random(5)
    users = [os.urandom(16) for _ in range(20_000)]
    deltas = [(k, os.urandom(60)) for k in users for _ in range(rnd.randint(1, 3))]
    rnd.shuffle(deltas)  # a user's deltas anywhere in the log: the last one logged wins
    merged, helped, unknown, other, kept = (os.urandom(16) for _ in range(5))
    rows = [(INTEGRATION, k, True, d) for k, d in deltas]
    rows[7:7] = [(INTEGRATION, merged, False, unknown), ("other", helped, True, other)]
    with state.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO engage_field_log (integration, user_key, fresh, "
                             "digests) VALUES (?, ?, ?, ?)", rows)
    log = tmp_path / "log.db"
    db = sqlite3.connect(log)
    db.execute("CREATE TABLE log (user_key BLOB NOT NULL, digests BLOB NOT NULL)")
    db.execute("INSERT INTO log VALUES (?, ?)", (helped, kept))
    db.commit()
    db.close()
    written = store_sqlite_file(str(tmp_path / "state.db"), INTEGRATION, str(log), "log",
                                threads=3, with_log=True)
    with state.engine.connect() as conn:
        got = dict(conn.exec_driver_sql(
            f"SELECT user_key, digests FROM {FIELDS_TABLE} WHERE integration = ?",
            (INTEGRATION,)).all())
        left = conn.exec_driver_sql(
            "SELECT integration, user_key FROM engage_field_log ORDER BY seq").all()
    assert written == len(deltas) + 1 and got == {**dict(deltas), helped: kept}
    assert [tuple(r) for r in left] == [(INTEGRATION, merged), ("other", helped)]


def test_the_runs_unknowns_are_applied_over_its_record_after_the_helpers_write(
    store: StateStore
) -> None:
    """A user the run digested itself (before its helper started), acknowledged, then in
    doubt: at close its record is its acknowledged object with every attribute of the one in
    doubt unknown, whether the helper's write took the run's fresh deltas (a SQLite file) or
    the run folded them before it (PostgreSQL); the log ends empty."""
    first: list[Any] = [_item(0, "free")]
    rest: list[Any] = [_item(1, "free")]
    differ = _split(store, first, rest)
    assert differ.helper is not None and differ.helper.takes_log == (
        store.engine.dialect.name == "sqlite")
    store.settle("r1", INTEGRATION, [], acked_fields=[(first[0].user, first[0].fields)])
    differ.settled(first + rest, [], first + rest)
    later: list[Any] = [_item(0, "gold")]
    differ.apply(later)
    store.settle("r2", INTEGRATION, [], acked_fields=[
        (later[0].user, field_record.unknown_fields(later[0].fields))])
    differ.settled([], later, later)
    differ.close()
    assert _logged(store) == 0
    assert _record(store) == {
        field_codec.user_key(first[0].user): dict.fromkeys(_whole(first[0]),
                                                           field_record.UNKNOWN),
        field_codec.user_key(rest[0].user): _whole(rest[0])}


def test_on_a_sqlite_file_the_helpers_write_takes_the_runs_fresh_deltas(
    store: StateStore
) -> None:
    """A SQLite file: the helper's write takes the run's fresh logged deltas into its pass, so
    the run folds nothing before it; PostgreSQL: the run's fold writes them (before, or
    after: their users are none of the helper's), the helper leaves the log alone."""
    own, handed = _item(0, "free"), _item(1, "free")
    helper = _helper(store)
    fields = field_record.FRESH + field_diff.whole_encoded(own.user, own.blob)
    store.settle("r1", INTEGRATION, [], acked_fields=[(own.user, fields)])
    _hand(helper, [handed])
    helper.finish()
    took = store.engine.dialect.name == "sqlite"
    assert helper.takes_log is took and _logged(store) == (0 if took else 1)
    want = {field_codec.user_key(handed.user): _whole(handed)}
    if took:
        want[field_codec.user_key(own.user)] = _whole(own)
    assert _record(store) == want


def test_a_helper_that_fails_its_write_leaves_the_runs_deltas_for_the_next_open(
        tmp_path: Path) -> None:
    """On a SQLite file the run leaves its fresh deltas to the helper's pass: when that pass
    fails (here: the helper cannot open the file it was given), close raises, the log still
    holds them, and the next run's open folds them; the helper's users have no record."""
    state = StateStore.from_url(f"sqlite:///{tmp_path / 'state.db'}")
    url = shareable_url(state.engine)
    assert url is not None
    first: list[Any] = [_item(0, "free")]
    rest: list[Any] = [_item(1, "free")]
    differ = _split(state, first, rest, start=lambda: FieldHelper(
        INTEGRATION, url, str(tmp_path / "gone" / "state.db")))
    state.settle("r1", INTEGRATION, [], acked_fields=[(first[0].user, first[0].fields)])
    differ.settled(first + rest, [], first + rest)
    with pytest.raises(SyncError, match="unable to open database file"):
        differ.close()
    assert _logged(state) == 1 and _record(state) == {}
    Differ(INTEGRATION, state).open()
    assert _logged(state) == 0
    assert _record(state) == {field_codec.user_key(first[0].user): _whole(first[0])}
