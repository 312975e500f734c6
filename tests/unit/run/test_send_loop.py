"""The send-and-settle loop (send_loop.py) with a fake deliverer and a fake state store: journal
before send, the cursor over the settled prefix only, one user at a time, a 401 stops the run
with the refused request unsettled."""

from __future__ import annotations

import contextvars
import threading
import time
from typing import Any

import pytest

from engage_sync import kinds
from engage_sync.cursor.progress import Cursor, Progress
from engage_sync.deliver.classify import Outcome
from engage_sync.deliver.deliverer import Delivery
from engage_sync.items import Item
from engage_sync.pack.batching import Batch
from engage_sync.pack.request import Request
from engage_sync.run import exact_journal
from engage_sync.run.exact_journal import SETTLE_WAIT, ExactSendLoop
from engage_sync.run.grouped_journal import GroupedSendLoop
from engage_sync.run.journaling import send_loop_for
from engage_sync.run.send_loop import FatalStop, Outgoing, RunContext, SendLoop
from engage_sync.state.records import JournalEntry, Settlement


class FakeState:
    """Records journal writes and settlements, in order."""

    def __init__(self) -> None:
        self.journaled: list[int] = []
        self.settled: list[tuple[str, int]] = []
        self.progress: list[Cursor] = []
        self.transactions = 0
        self.lock = threading.Lock()
        self.groups: list[int] = []  # entries journaled by each transaction that journaled
        self.sender: SendLoop | None = None
        self.overfull = 0  # journaled while the requests in flight left no room for them
        self.settled_at: dict[int, float] = {}

    def _journaled(self, entries: list[JournalEntry]) -> None:
        self.groups.append(len(entries))
        if self.sender is not None and \
                len(self.sender.in_flight) + len(entries) > self.sender.ctx.max_in_flight:
            self.overfull += 1

    def journal_pending(self, run_id: str, entries: list[JournalEntry],
                        owner: str | None = None) -> None:
        with self.lock:
            self.transactions += 1
            self.journaled += [e.req_no for e in entries]
            self._journaled(entries)

    def settle(self, run_id: str, integration: str, settlements: list[Settlement],
               progress: Cursor | None = None, move_cursor: bool = True,
               acked_rows: Any = (), acked_fields: Any = (), points: int = 0,
               owner: str | None = None, pending: list[JournalEntry] = ()) -> None:  # type: ignore[assignment]
        with self.lock:
            self.transactions += 1
            self.journaled += [e.req_no for e in pending]
            if pending:
                self._journaled(pending)
            self.settled += [(s.state, s.req_no) for s in settlements]
            self.settled_at.update({s.req_no: time.monotonic() for s in settlements})
            if progress is not None:
                self.progress.append(tuple(progress))


class FakeDeliverer:
    """Answers each request with `answers[first item's key]` (default ok), holding it until its
    gate opens; records what was in flight and whether it was journaled first."""

    def __init__(self, state: FakeState, answers: dict[str, Outcome] | None = None) -> None:
        self.state, self.answers = state, answers or {}
        self.gates: dict[str, threading.Event] = {}
        self.in_flight: list[str] = []
        self.overlaps: list[set[str]] = []
        self.unjournaled = 0
        self.sent: list[str] = []
        self.delays: dict[str, float] = {}
        self.answered_at: dict[str, float] = {}
        self.lock = threading.Lock()

    def send(self, request: Request) -> Delivery:
        key = request.items[0].key
        users = {i.user for i in request.items}
        with self.lock:
            self.sent.append(key)
            if len(self.state.journaled) < len(self.sent):
                self.unjournaled += 1
            self.overlaps.append(users & {u for k in self.in_flight for u in k.split(",")})
            self.in_flight.append(",".join(sorted(users)))
        gate = self.gates.get(key)
        if gate is not None:
            assert gate.wait(5)
        time.sleep(self.delays.get(key, 0))
        with self.lock:
            self.in_flight.remove(",".join(sorted(users)))
            self.answered_at[key] = time.monotonic()
        return Delivery(self.answers.get(key, Outcome("ok", "accepted", 201)), attempts=1)


def segment(k: int, user: str) -> Outgoing:
    """Request k (1-based) covering rows (k-1, k], one item of `user`."""
    items = (Item(k, f"r{k}", user, "events", b"{}"),)
    batch = Batch(items, (("events", 0),), b'{"events":[{}]}', "/users/track")
    return Outgoing((k - 1,) if k > 1 else None, (k,), batch=batch)


def loop(state: FakeState, deliverer: FakeDeliverer, group: bool = False,
         in_flight: int = 4, admit: int | None = None, on_settled: Any = None,
         holds: threading.Event | None = None,
         idle: Any = None) -> tuple[SendLoop, dict[str, int]]:
    """A send loop over the fakes; `admit`: an exact journal's group (default: its own);
    `holds`: set while the rate budget holds the requests in flight (default: never);
    `idle`: the context's idle work."""
    counts = {"requests": 0, "synced": 0, "failed": 0, "in_doubt": 0}
    ctx = RunContext(run_id="run", integration="events", state=state,  # type: ignore[arg-type]
                     deliverer=deliverer, max_in_flight=in_flight,  # type: ignore[arg-type]
                     group_commits=group, resend_in_doubt=False, bulk=False,
                     may_move_cursor=lambda _: True, counts=counts, report=lambda: None,
                     on_settled=on_settled,
                     budget_holds=holds.is_set if holds is not None else bool, idle=idle)
    sender = send_loop_for(ctx, Progress(None))
    if admit is not None:
        sender.admit = admit
    state.sender = sender
    return sender, counts


@pytest.mark.parametrize("group", [False, True])
def test_every_request_is_journaled_before_it_leaves(group: bool) -> None:
    state = FakeState()
    deliverer = FakeDeliverer(state)
    sender, counts = loop(state, deliverer, group=group)
    for k in range(1, 71):
        sender.submit(segment(k, f"u{k % 7}"), k)
    sender.drain()
    sender.close()
    assert deliverer.unjournaled == 0
    assert sorted(state.journaled) == list(range(1, 71))
    assert counts["synced"] == 70 and state.progress[-1] == (70,)


def test_an_exact_journal_settles_a_request_with_the_next_ones_journal_entry() -> None:
    # one request in flight: each submit waits for the one before, then settles it and
    # journals its own request in one transaction (two commits a request before)
    state = FakeState()
    sender, counts = loop(state, FakeDeliverer(state), in_flight=1)
    for k in range(1, 31):
        sender.submit(segment(k, f"u{k}"), k)
    sender.drain()
    sender.close()
    assert state.transactions == 31  # 30 requests and the drain's last settle
    assert sorted(state.journaled) == list(range(1, 31))
    assert [n for _, n in state.settled] == list(range(1, 31))
    assert counts["synced"] == 30
    assert state.overfull == 0


def _settled_in_flight(sender: SendLoop) -> None:
    deadline = time.monotonic() + 5
    while not all(f.done() for f in sender.in_flight):
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_an_exact_journal_journals_queued_requests_together_when_there_is_room() -> None:
    # four in flight at most: requests are queued two at a time, and two with room for both
    # are journaled in one transaction
    state = FakeState()
    deliverer = FakeDeliverer(state)
    sender, counts = loop(state, deliverer, in_flight=4)
    assert sender.admit == 2
    for k in range(1, 41, 2):
        _settled_in_flight(sender)  # the service answered: room for both
        sender.submit(segment(k, f"u{k}"), k)
        sender.submit(segment(k + 1, f"u{k + 1}"), k + 1)
    sender.drain()
    sender.close()
    assert state.groups == [2] * 20
    assert state.overfull == 0 and deliverer.unjournaled == 0
    assert sorted(n for _, n in state.settled) == list(range(1, 41))
    assert counts["synced"] == 40 and state.progress[-1] == (40,)


def test_with_room_for_one_request_one_leaves_at_once() -> None:
    # r1-r3 held in flight: of the queued r5 and r6 each leaves as soon as a request ends,
    # never journaled without room (the pool does not wait for room for the pair)
    state = FakeState()
    deliverer = FakeDeliverer(state)
    gates = {f"r{k}": threading.Event() for k in (1, 2, 3)}
    deliverer.gates.update(gates)
    sender, _ = loop(state, deliverer, in_flight=4)
    for k in range(1, 7):
        sender.submit(segment(k, f"u{k}"), k)
    for gate in gates.values():
        gate.set()
    sender.drain()
    sender.close()
    assert state.groups == [2, 2, 1, 1] and state.overfull == 0
    assert deliverer.sent == [f"r{k}" for k in range(1, 7)]


@pytest.mark.parametrize("spacing, r2_after, groups", [
    (0.01, 0.05, [2, 2, 2]),  # requests end close together: r5 waits for r2, leaves with r6
    (None, 0.05, [2, 2, 2]),  # the same, measured from 40 requests that ended at once
    (1.0, 0.1, [2, 2, 1, 1]),  # they end far apart: r5 leaves as soon as r1 ends
    (0.01, 1.0, [2, 2, 1, 1]),  # r2 ends after ADMIT_WAIT: r5 has left alone by then
], ids=["close", "close-measured", "far-apart", "past-the-wait"])
def test_room_for_a_group_is_waited_for_only_when_requests_end_close_together(
        monkeypatch: pytest.MonkeyPatch, spacing: float | None, r2_after: float,
        groups: list[int]) -> None:
    monkeypatch.setattr(exact_journal, "ADMIT_WAIT", 0.3)
    state = FakeState()
    deliverer = FakeDeliverer(state)
    sender, _ = loop(state, deliverer, in_flight=4)
    warm = 0 if spacing is not None else 40  # answered at once, before the six below
    for k in range(1, warm + 1):
        sender.submit(segment(k, f"w{k}"), k)
    _settled_in_flight(sender)  # the warm-up all answered: room for the six
    n = warm + 1  # the first of the six: r1 below
    first = threading.Event()  # r1 ends when it opens, r2 `r2_after` later
    rest = threading.Event()
    deliverer.gates.update({f"r{n}": first, f"r{n + 1}": first, f"r{n + 2}": rest,
                            f"r{n + 3}": rest})
    deliverer.delays[f"r{n + 1}"] = r2_after
    for k in range(n, n + 4):
        sender.submit(segment(k, f"u{k}"), k)
    if spacing is not None:
        sender.spacing = spacing  # how far apart requests have been ending
    threading.Timer(0.1, first.set).start()
    for k in (n + 4, n + 5):
        sender.submit(segment(k, f"u{k}"), k)
    rest.set()
    sender.drain()
    sender.close()
    assert state.groups[-len(groups):] == groups and state.overfull == 0
    assert sorted(n for _, n in state.settled) == list(range(1, warm + 7))


def test_an_acknowledged_request_waits_unsettled_at_most_the_settle_wait() -> None:
    # the loop waits for r1 (r10 shares its user) while r2-r9 end 30 ms apart: r2 is settled
    # about SETTLE_WAIT after its answer, not once the others stop ending (≈ 260 ms later)
    state = FakeState()
    deliverer = FakeDeliverer(state)
    deliverer.gates["r1"] = gate = threading.Event()
    deliverer.delays.update({f"r{k}": 0.03 * (k - 1) for k in range(2, 10)})
    sender, _ = loop(state, deliverer, in_flight=10, admit=1)
    for k in range(1, 10):
        sender.submit(segment(k, f"u{k}"), k)
    threading.Timer(0.6, gate.set).start()
    sender.submit(segment(10, "u1"), 10)  # waits for r1
    sender.drain()
    sender.close()
    assert state.settled_at[2] - deliverer.answered_at["r2"] < SETTLE_WAIT + 0.1
    assert sorted(n for _, n in state.settled) == list(range(1, 11))


def test_a_group_stops_before_a_second_request_of_one_user() -> None:
    state = FakeState()
    deliverer = FakeDeliverer(state)
    sender, _ = loop(state, deliverer, in_flight=8)  # groups of four
    for k, user in enumerate(["a", "b", "a", "c", "d", "e", "f", "g"], start=1):
        sender.submit(segment(k, user), k)
    sender.drain()
    sender.close()
    # r1, r2; r3 (a again, once r1 ended) with r4; then r5-r8
    assert state.groups == [2, 2, 4]
    assert all(not users for users in deliverer.overlaps)
    assert deliverer.sent[:3] == ["r1", "r2", "r3"]


def three_sent_the_first_held() -> tuple[FakeState, SendLoop, threading.Event, float]:
    """Requests 1-3 of users u1-u3 sent, request 1 held until the returned gate opens; and a
    deadline for the test's waits."""
    state = FakeState()
    deliverer = FakeDeliverer(state)
    deliverer.gates["r1"] = gate = threading.Event()
    sender, _ = loop(state, deliverer, admit=1)
    for k in (1, 2, 3):
        sender.submit(segment(k, f"u{k}"), k)
    deadline = time.monotonic() + 5
    while len(deliverer.sent) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return state, sender, gate, deadline


def test_no_acknowledged_request_waits_unsettled_while_the_loop_waits_again() -> None:
    state, sender, gate, deadline = three_sent_the_first_held()
    waiting = threading.Thread(target=sender.submit, args=(segment(4, "u1"), 4))
    waiting.start()  # request 4 shares request 1's user: it waits for request 1
    while len(state.settled) < 2:  # requests 2 and 3 are settled while it waits
        assert time.monotonic() < deadline, state.settled
        time.sleep(0.01)
    assert sorted(state.settled) == [("acked", 2), ("acked", 3)]
    gate.set()
    waiting.join(5)
    sender.drain()
    sender.close()
    assert sorted(n for _, n in state.settled) == [1, 2, 3, 4]


def test_the_cursor_waits_for_a_slow_first_request() -> None:
    state, sender, gate, _ = three_sent_the_first_held()
    sender.submit(segment(4, "u4"), 4)  # waits for room: collects 2 and 3 meanwhile
    assert all(p < (1,) for p in state.progress)  # requests 2, 3 done; request 1 is not
    gate.set()
    sender.drain()
    sender.close()
    assert state.progress[-1] == (4,)


def test_two_requests_of_one_user_are_never_in_flight_together() -> None:
    state = FakeState()
    deliverer = FakeDeliverer(state)
    deliverer.gates["r1"] = gate = threading.Event()
    sender, _ = loop(state, deliverer)
    threading.Timer(0.2, gate.set).start()
    for k in range(1, 9):
        sender.submit(segment(k, "same" if k in (1, 2) else f"u{k}"), k)
    sender.drain()
    sender.close()
    assert all(not users for users in deliverer.overlaps)
    assert deliverer.sent.index("r2") > deliverer.sent.index("r1")


def test_a_refused_key_stops_the_run_and_leaves_the_request_unsettled() -> None:
    state = FakeState()
    deliverer = FakeDeliverer(state, {"r2": Outcome("fatal", "HTTP 401: invalid API key", 401)})
    sender, counts = loop(state, deliverer, in_flight=1)
    sender.submit(segment(1, "u1"), 1)
    sender.submit(segment(2, "u2"), 2)
    sender.submit(segment(3, "u3"), 3)
    with pytest.raises(FatalStop, match="401"):
        sender.drain()
    sender.close()
    assert ("acked", 1) in state.settled and all(n != 2 for _, n in state.settled)
    assert state.progress[-1] == (1,)  # never past the refused request
    assert counts["synced"] <= 2


def test_in_doubt_and_item_errors_are_counted_and_settle() -> None:
    """And the stages hear, after each settle, which items were acknowledged, which ended in
    doubt (not those that failed) and every item settled."""
    state = FakeState()
    deliverer = FakeDeliverer(state, {
        "r1": Outcome("in_doubt", "HTTP 500", 500),
        "r2": Outcome("ok", "accepted", 201, item_errors={0: "invalid"}),
        "r3": Outcome("ok", "accepted", 201),
    })
    heard: list[tuple[list[str], ...]] = []
    sender, counts = loop(state, deliverer, on_settled=lambda *lists: heard.append(
        tuple([i.key for i in items] for items in lists)))
    for k in (1, 2, 3):
        sender.submit(segment(k, f"u{k}"), k)
    sender.drain()
    sender.close()
    assert (counts["in_doubt"], counts["failed"], counts["synced"]) == (1, 1, 1)
    assert sorted(state.settled) == [("acked", 2), ("acked", 3), ("in_doubt", 1)]
    assert state.progress[-1] == (3,)
    acked, doubted, settled = ([k for h in heard for k in h[n]] for n in range(3))
    assert (acked, doubted, sorted(settled)) == (["r3"], ["r1"], ["r1", "r2", "r3"])


def test_what_was_settled_is_not_settled_again_when_a_stage_fails_after_it() -> None:
    """A stage's hook raises after a settle (the field helper died): the run then settles
    what is in flight, and the requests already settled are not settled a second time (their
    points and errors would be counted twice)."""
    from engage_sync.errors import SyncError

    state = FakeState()
    deliverer = FakeDeliverer(state)
    calls: list[int] = []

    def failing(*lists: Any) -> None:
        calls.append(len(lists[0]))
        raise SyncError("integration events: the helper failed")

    sender, _ = loop(state, deliverer, on_settled=failing)
    sender.submit(segment(1, "u1"), 1)
    with pytest.raises(SyncError):
        sender.drain()
    sender.settle_in_flight()  # what the run does after an error
    sender.close()
    assert state.settled == [("acked", 1)] and calls == [1]


def test_a_request_is_sent_in_the_context_of_the_thread_that_submitted_it() -> None:
    """What a sending thread logs belongs to the run of the thread that read the rows: Prefect
    finds a record's flow or task run in the logging thread's context, so partitions running
    side by side in one process each get their own lines."""
    run = contextvars.ContextVar("run", default="none")
    seen: list[str] = []

    class Seeing(FakeDeliverer):
        def send(self, request: Request) -> Delivery:
            seen.append(run.get())
            return super().send(request)

    state = FakeState()
    sender, _ = loop(state, Seeing(state))
    for k, name in ((1, "partition-0"), (2, "partition-1")):
        token = run.set(name)
        sender.submit(segment(k, f"u{k}"), k)
        sender.drain()
        run.reset(token)
    sender.close()
    assert seen == ["partition-0", "partition-1"]


def _submitting(sender: SendLoop, ks: range) -> threading.Thread:
    """Submits requests `ks` (user u<k>) in a thread of their own, started."""
    def submit() -> None:
        for k in ks:
            sender.submit(segment(k, f"u{k}"), k)

    thread = threading.Thread(target=submit)
    thread.start()
    return thread


def _held(ks: range) -> tuple[FakeState, FakeDeliverer, threading.Event, threading.Event]:
    """The fakes, with requests `ks` answered only once the returned gate opens; and the event
    set while the rate budget holds (clear)."""
    state = FakeState()
    deliverer = FakeDeliverer(state)
    gate = threading.Event()
    deliverer.gates.update({f"r{k}": gate for k in ks})
    return state, deliverer, gate, threading.Event()


def _released(sender: SendLoop, holds: threading.Event, gate: threading.Event) -> None:
    """The budget grants and the held requests are answered; everything sent and settled."""
    holds.clear()
    gate.set()
    sender.drain()
    sender.close()


def test_while_the_rate_budget_holds_an_exact_journal_packs_ahead_unjournaled() -> None:
    # r1-r4 fill the room and wait for the budget: r5-r20 are queued without waiting, none
    # journaled; once the budget grants they leave in order, each journaled before it leaves
    state, deliverer, gate, holds = _held(range(1, 5))
    sender, counts = loop(state, deliverer, in_flight=4, holds=holds)
    _submitting(sender, range(1, 5)).join(5)
    holds.set()
    packing = _submitting(sender, range(5, 21))
    packing.join(5)
    assert not packing.is_alive()  # it never waited for room
    assert sorted(state.journaled) == [1, 2, 3, 4] and len(sender.queue) == 16
    _released(sender, holds, gate)
    assert deliverer.sent == [f"r{k}" for k in range(1, 21)]
    assert deliverer.unjournaled == 0 and state.overfull == 0
    assert counts["synced"] == 20 and state.progress[-1] == (20,)


def test_packing_ahead_stops_at_AHEAD_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact_journal, "AHEAD", 6)
    state, deliverer, gate, holds = _held(range(1, 5))
    holds.set()
    sender, _ = loop(state, deliverer, in_flight=4, holds=holds)
    _submitting(sender, range(1, 5)).join(5)
    waiting = _submitting(sender, range(5, 12))
    waiting.join(0.3)
    assert waiting.is_alive() and len(sender.queue) == 6  # the 7th waits for room
    holds.clear()
    gate.set()
    waiting.join(5)
    _released(sender, holds, gate)
    assert deliverer.sent == [f"r{k}" for k in range(1, 12)] and state.overfull == 0


def test_a_loop_waiting_for_room_packs_ahead_once_the_budget_holds() -> None:
    state, deliverer, gate, holds = _held(range(1, 5))
    sender, _ = loop(state, deliverer, in_flight=4, holds=holds)
    _submitting(sender, range(1, 5)).join(5)
    waiting = _submitting(sender, range(5, 7))  # a pair: waits for room for r5
    waiting.join(0.2)
    assert waiting.is_alive()
    holds.set()  # the requests in flight now wait for the budget
    waiting.join(1)
    assert not waiting.is_alive() and sorted(state.journaled) == [1, 2, 3, 4]
    _released(sender, holds, gate)
    assert deliverer.sent == [f"r{k}" for k in range(1, 7)]


def test_an_acknowledged_request_is_settled_within_the_settle_wait_while_packing_ahead(
        ) -> None:
    state, deliverer, gate, holds = _held(range(2, 5))
    deliverer.gates["r1"] = first = threading.Event()
    sender, _ = loop(state, deliverer, in_flight=4, holds=holds)
    _submitting(sender, range(1, 5)).join(5)
    holds.set()  # r2-r4 wait for the budget; r1 is answered now
    first.set()
    k = 5
    deadline = time.monotonic() + 5
    while 1 not in state.settled_at:  # packing ahead, one request every 10 ms
        assert time.monotonic() < deadline
        sender.submit(segment(k, f"u{k}"), k)
        k += 1
        time.sleep(0.01)
    assert state.settled_at[1] - deliverer.answered_at["r1"] < SETTLE_WAIT + 0.05
    assert sorted(state.journaled) == [1, 2, 3, 4] and k > 6  # settled while packing ahead
    _released(sender, holds, gate)
    assert sorted(n for _, n in state.settled) == list(range(1, k))


def test_idle_work_is_done_while_the_budget_holds_a_full_queue_once_per_IDLE_EVERY(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact_journal, "AHEAD", 2)
    monkeypatch.setattr(exact_journal, "IDLE_EVERY", 3)
    state, deliverer, gate, holds = _held(range(7, 11))
    idled = threading.Event()
    calls: list[int] = []

    def idle() -> None:
        calls.append(sender.settled)
        idled.set()

    sender, _ = loop(state, deliverer, in_flight=4, holds=holds, idle=idle)
    _submitting(sender, range(1, 7)).join(5)  # answered at once
    _submitting(sender, range(7, 11)).join(5)  # r7-r10 wait for the budget
    assert calls == []  # the budget never held
    holds.set()
    waiting = _submitting(sender, range(11, 13))  # the queue full: waits for room
    assert idled.wait(5) and waiting.is_alive()
    time.sleep(0.05)  # looks every HOLD_LOOK: nothing settled since, so no second round
    assert len(calls) == 1 and calls[0] >= 3
    holds.clear()
    gate.set()
    waiting.join(5)
    _released(sender, holds, gate)
    assert deliverer.sent == [f"r{k}" for k in range(1, 13)]


def test_idle_work_that_fails_is_logged_and_the_run_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Housekeeping (the journal compacted early) is redone at the run's end: its failure
    costs the run nothing; what was acknowledged is settled before it starts."""
    monkeypatch.setattr(exact_journal, "AHEAD", 2)
    monkeypatch.setattr(exact_journal, "IDLE_EVERY", 1)
    state, deliverer, gate, holds = _held(range(3, 7))
    unsaved_at_idle: list[int] = []

    def idle() -> None:
        unsaved_at_idle.append(len(sender.unsaved))
        raise ValueError("a journal entry's item keys are not a JSON array")

    sender, _ = loop(state, deliverer, in_flight=4, holds=holds, idle=idle)
    _submitting(sender, range(1, 3)).join(5)  # answered at once
    _submitting(sender, range(3, 7)).join(5)  # r3-r6 wait for the budget
    holds.set()
    waiting = _submitting(sender, range(7, 9))
    deadline = time.monotonic() + 5
    while not unsaved_at_idle:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    holds.clear()
    gate.set()
    waiting.join(5)
    _released(sender, holds, gate)
    assert unsaved_at_idle[0] == 0 and "the idle work failed" in caplog.text
    assert deliverer.sent == [f"r{k}" for k in range(1, 9)]
    assert sorted(n for _, n in state.settled) == list(range(1, 9))


@pytest.mark.parametrize("name", kinds.names())
def test_the_journaling_is_chosen_once_from_the_kind(name: str) -> None:
    """Attributes (the kind that groups its commits) get the grouped journal, whose entries
    name no items; every other kind the exact journal, whose entries name each item. The class
    is the mode: nothing in the loop asks again."""
    kind = kinds.get(name)
    state = FakeState()
    ctx = RunContext(run_id="run", integration=name, state=state,  # type: ignore[arg-type]
                     deliverer=FakeDeliverer(state),  # type: ignore[arg-type]
                     max_in_flight=4, group_commits=kind.group_commits,
                     resend_in_doubt=False, bulk=False, may_move_cursor=lambda _: True,
                     counts={"requests": 0, "synced": 0, "failed": 0, "in_doubt": 0},
                     report=lambda: None)
    sender = send_loop_for(ctx, Progress(None))
    expected = GroupedSendLoop if name == "attributes" else ExactSendLoop
    assert type(sender) is expected
    assert kind.group_commits == (name == "attributes")
    first = segment(1, "u1")
    sender.submit(first, 1)
    sender.drain()
    sender.close()
    assert first.entry is not None
    assert (first.entry.keys is None) == (expected is GroupedSendLoop)
    assert sorted(state.journaled) == [1]
