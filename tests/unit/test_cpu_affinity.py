"""ENGAGE_SYNC_PIN_CPU: which CPU a setting names (pure), and the pin itself, in a child
interpreter so that the test process is never pinned."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from engage_sync.cpu_affinity import (
    busy_ticks,
    candidates,
    claim_cpu,
    load_reader,
    pin_setting,
    run_pin,
)
from engage_sync.errors import ConfigError

ALLOWED = frozenset({0, 1, 2, 3})


def _never() -> dict[int, int]:
    raise AssertionError("only `auto` reads the CPUs' load")


@pytest.mark.parametrize("text", ["", "off", " OFF "])
def test_off_and_unset_pin_nothing(text: str) -> None:
    assert candidates(text, ALLOWED, _never) is None


def test_a_number_names_that_cpu() -> None:
    assert candidates("2", ALLOWED, _never) == [2]


@pytest.mark.parametrize(("text", "said"), [
    ("7", "CPU 7 is not one this process may run on (0, 1, 2, 3)"),
    ("first", "must be `off`, `auto` or a CPU number"),
    ("-1", "must be `off`, `auto` or a CPU number"),
    ("²", "must be `off`, `auto` or a CPU number"),
])
def test_a_bad_setting_is_a_config_error_naming_the_setting(text: str, said: str) -> None:
    with pytest.raises(ConfigError, match="ENGAGE_SYNC_PIN_CPU") as caught:
        candidates(text, ALLOWED, _never)
    assert said in str(caught.value)


def test_auto_prefers_the_cpus_least_busy_between_two_readings() -> None:
    readings = iter([{0: 100, 1: 100, 2: 500, 3: 900}, {0: 180, 1: 130, 2: 510, 3: 990}])
    assert candidates("auto", ALLOWED, lambda: next(readings)) == [2, 1, 0, 3]


def test_auto_never_offers_a_cpu_the_process_may_not_use() -> None:
    readings = iter([{0: 0, 1: 0, 5: 0}, {0: 50, 1: 40, 5: 0}])
    assert candidates("auto", frozenset({0, 1}), lambda: next(readings)) == [1, 0]


def test_a_cpu_claimed_by_another_run_is_passed_over_until_its_claim_ends(
        tmp_path: Path) -> None:
    first = claim_cpu([3, 1], str(tmp_path))
    assert first is not None and first[0] == 3
    second = claim_cpu([3, 1], str(tmp_path))  # another open file: as another process
    assert second is not None and second[0] == 1
    assert claim_cpu([3, 1], str(tmp_path)) is None  # every CPU held: no pin
    os.close(first[1])  # that run ended
    third = claim_cpu([3, 1], str(tmp_path))
    assert third is not None and third[0] == 3
    os.close(second[1])
    os.close(third[1])


def test_a_folder_where_no_claim_can_be_made_claims_nothing(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    assert claim_cpu([0, 1], str(not_a_folder)) is None


def test_busy_ticks_count_user_nice_and_system_only(tmp_path: Path) -> None:
    """Idle, I/O wait, interrupts and steal left out; guest time (the last two) is in user."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  9 9 9 9 9 9 9 9 9 9\n"
                    "cpu0 10 1 5 1000 7 2 3 6 4 4\n"
                    "cpu1 1 0 1 50 0 0 0 0 0 0\nintr 5 6\n")
    assert busy_ticks(str(stat)) == {0: 16, 1: 2}


def test_a_load_without_a_line_for_an_allowed_cpu_is_not_trusted(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  9 9 9 9\ncpu0 10 1 5 1000\n")
    none = tmp_path / "mountinfo"
    none.write_text("22 1 0:5 / /proc rw - proc proc rw\n")
    assert load_reader(frozenset({0}), str(stat), str(none))() == {0: 16}
    with pytest.raises(ValueError, match="no line for CPU 1"):
        load_reader(frozenset({0, 1}), str(stat), str(none))


def test_a_view_mounted_over_proc_stat_is_not_trusted(tmp_path: Path) -> None:
    """lxcfs gives a container its own /proc/stat, without the other containers' load."""
    stat = tmp_path / "stat"
    stat.write_text("cpu0 10 1 5 1000\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("22 1 0:5 / /proc rw - proc proc rw\n"
                         f"40 22 0:44 /proc/stat {stat} rw - fuse.lxcfs lxcfs rw\n")
    with pytest.raises(ValueError, match="mounted over"):
        load_reader(frozenset({0}), str(stat), str(mountinfo))


def test_cpus_equally_busy_are_offered_in_a_random_order() -> None:
    """Runs started together on idle CPUs must not all take the lowest number."""
    draws = iter([0.9, 0.1, 0.5])
    readings = iter([{0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 0}])
    assert candidates("auto", frozenset({0, 1, 2}), lambda: next(readings),
                      lambda: next(draws)) == [1, 2, 0]




def test_the_setting_is_checked_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pin_setting({"ENGAGE_SYNC_PIN_CPU": " Off "}) is None
    assert pin_setting({"ENGAGE_SYNC_PIN_CPU": "AUTO"}) == "auto"
    assert pin_setting({}) is pin_setting({"ENGAGE_SYNC_PIN_CPU": " "}) is None  # the default
    with pytest.raises(ConfigError, match="is not one this process may run on"):
        pin_setting({"ENGAGE_SYNC_PIN_CPU": "100000"})
    monkeypatch.delattr(os, "sched_setaffinity")
    assert pin_setting({}) is None  # no pin where there is none to have, and nothing said
    with pytest.raises(ConfigError, match="needs Linux"):
        pin_setting({"ENGAGE_SYNC_PIN_CPU": "auto"})


LINUX_2 = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and two CPUs")


def _in_thread(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`body` in a thread of its own: a pin never touches the test's thread."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out.update(body())
        except BaseException as exc:  # reported by the test
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(600)  # a pinned body shares one CPU with whatever else runs: a generous deadline
    assert not t.is_alive(), "the pinned body did not finish within 600 s"
    if "error" in out:
        raise out["error"]
    return out


@LINUX_2
def test_a_run_pins_its_thread_and_the_threads_it_starts_then_lets_go(tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    early = threading.Event()
    before_run = threading.Thread(target=early.wait)  # started before the run: left alone
    before_run.start()

    def body() -> dict[str, Any]:
        first = os.sched_getaffinity(0)
        with run_pin(str(cpu), str(tmp_path)) as pinned:
            started: dict[str, Any] = {}
            t = threading.Thread(target=lambda: started.update(cpus=os.sched_getaffinity(0)))
            t.start()
            t.join()
            inside = os.sched_getaffinity(0)
            early_cpus = os.sched_getaffinity(before_run.native_id or 0)
        return {"pinned": pinned, "inside": inside, "started": started["cpus"],
                "early": early_cpus, "first": first, "after": os.sched_getaffinity(0)}

    try:
        seen = _in_thread(body)
    finally:
        early.set()
        before_run.join()
    assert seen["pinned"] == cpu and seen["inside"] == seen["started"] == {cpu}
    assert seen["early"] == seen["first"] == seen["after"]


@LINUX_2
def test_a_field_helper_started_by_a_pinned_run_runs_on_the_other_cpus(tmp_path: Path) -> None:
    from engage_sync.diff.helper import FieldHelper

    cpu = min(os.sched_getaffinity(0))

    def body() -> dict[str, Any]:
        first = os.sched_getaffinity(0)
        with run_pin(str(cpu), str(tmp_path)):
            helper = FieldHelper("i", f"sqlite:///{tmp_path / 'state.db'}")
            try:
                placed = os.sched_getaffinity(helper._proc.pid)
            finally:
                helper.stop()
        return {"first": first, "placed": placed}

    seen = _in_thread(body)
    assert seen["placed"] == seen["first"] - {cpu}


@LINUX_2
def test_a_second_run_of_the_process_is_not_pinned_while_the_first_is(tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    holding, done = threading.Event(), threading.Event()

    def first() -> dict[str, Any]:
        with run_pin(str(cpu), str(tmp_path)) as pinned:
            holding.set()
            done.wait(30)
        return {"first": pinned}

    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(_in_thread(first)))
    t.start()
    assert holding.wait(30)

    def second() -> dict[str, Any]:
        with run_pin("auto", str(tmp_path)) as pinned:
            return {"second": pinned, "cpus": os.sched_getaffinity(0)}

    try:
        seen = _in_thread(second)
    finally:
        done.set()
        t.join()
    assert out["first"] == cpu and seen["second"] is None and len(seen["cpus"]) > 1


@LINUX_2
def test_two_auto_runs_of_one_host_take_two_cpus_and_a_third_is_not_pinned(
        tmp_path: Path) -> None:
    """Three processes with `auto` at once, each allowed the same two CPUs and holding its
    claim while its run lasts."""
    hold = textwrap.dedent("""
        import os, sys
        from engage_sync.cpu_affinity import run_pin
        os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
        with run_pin("auto", sys.argv[1]) as cpu:
            print(cpu, flush=True)
            sys.stdin.read()  # the run lasts until the test lets go
    """)
    cpus = sorted(os.sched_getaffinity(0))[:2]
    procs: list[subprocess.Popen[str]] = []
    said: list[str] = []
    try:
        for _ in range(3):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", hold, str(tmp_path), ",".join(map(str, cpus))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            assert procs[-1].stdout is not None
            said.append(procs[-1].stdout.readline().strip())
        assert sorted(said[:2]) == [str(c) for c in cpus] and said[2] == "None"
    finally:
        for proc in procs:
            proc.communicate("", timeout=30)


@LINUX_2
def test_a_pin_the_system_refuses_leaves_the_run_unpinned_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A sandbox's policy (EPERM) or CPUs taken away meanwhile (EINVAL): the run goes on."""
    def refuse(_tid: int, _cpus: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    caplog.set_level("INFO", logger="engage_sync.cpu")
    seen = _in_thread(lambda: {"pinned": _pinned_in(run_pin("auto", str(tmp_path)))})
    assert seen["pinned"] is None
    assert "refused to keep the run on CPU" in caplog.text
    assert claim_cpu([0], str(tmp_path)) is not None  # its claim was let go


def _pinned_in(pin: Any) -> int | None:
    with pin as cpu:
        return cast(int | None, cpu)


@LINUX_2
def test_cpus_changed_while_the_run_ran_are_left_as_they_were_set(tmp_path: Path) -> None:
    """`taskset` narrowed the run meanwhile: its end does not widen it back."""
    cpus = sorted(os.sched_getaffinity(0))

    def body() -> dict[str, Any]:
        with run_pin(str(cpus[0]), str(tmp_path)):
            os.sched_setaffinity(0, {cpus[1]})  # as `taskset -a -p -c` would
        return {"after": os.sched_getaffinity(0)}

    assert _in_thread(body)["after"] == {cpus[1]}


@LINUX_2
def test_a_refusal_at_the_runs_end_is_not_the_runs_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.sched_setaffinity
    calls: list[object] = []

    def second_refused(tid: int, cpus: Any) -> None:
        calls.append(cpus)
        if len(calls) > 1:
            raise OSError(22, "Invalid argument")
        real(tid, cpus)

    cpu = max(os.sched_getaffinity(0))

    def body() -> dict[str, Any]:
        first = os.sched_getaffinity(0)
        with run_pin(str(cpu), str(tmp_path)) as pinned:
            pass
        os.sched_setaffinity = real  # this thread's own clean-up, before it ends
        real(0, first)
        return {"pinned": pinned}

    monkeypatch.setattr(os, "sched_setaffinity", second_refused)
    assert _in_thread(body)["pinned"] == cpu and len(calls) == 2


@LINUX_2
def test_auto_leaves_a_cpu_another_process_keeps_busy(tmp_path: Path) -> None:
    """The pin follows load (`cpu_watch`): a process spinning on the run's CPU, pinned there
    as a run that could not see this one's claim would be, makes the run leave that CPU
    within a few looks (to a freer CPU, or unpinned if none is freer: on a busy host, the
    other CPU may be taken too)."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        def body() -> dict[str, Any]:
            with run_pin("auto", str(tmp_path)) as cpu:
                assert cpu is not None
                os.sched_setaffinity(spin.pid, {cpu})
                deadline = time.monotonic() + 20
                while os.sched_getaffinity(0) == {cpu} and time.monotonic() < deadline:
                    time.sleep(0.05)
                return {"cpu": cpu, "now": os.sched_getaffinity(0)}

        seen = _in_thread(body)
    finally:
        spin.kill()
        spin.wait()
    assert seen["now"] != {seen["cpu"]}, seen
    assert seen["now"] <= os.sched_getaffinity(0)


@LINUX_2
def test_auto_with_one_cpu_allowed_pins_nothing(tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0))

    def body() -> dict[str, Any]:
        os.sched_setaffinity(0, {cpu})  # a container given one CPU
        with run_pin("auto", str(tmp_path)) as pinned:
            return {"pinned": pinned}

    assert _in_thread(body)["pinned"] is None


@LINUX_2
def test_a_move_onto_a_cpu_another_run_claimed_is_refused(tmp_path: Path) -> None:
    from engage_sync import cpu_affinity

    cpus = sorted(os.sched_getaffinity(0))[:2]

    def body() -> dict[str, Any]:
        with run_pin("auto", str(tmp_path)) as cpu:
            assert cpu is not None
            other = next(c for c in cpus if c != cpu)
            held = claim_cpu([other], str(tmp_path))  # another run of this folder
            assert held is not None
            pin = cpu_affinity._pinned
            assert pin is not None
            moved = cpu_affinity.move_pin(pin, other, str(tmp_path))
            os.close(held[1])
            return {"moved": moved, "now": os.sched_getaffinity(0), "cpu": cpu}

    seen = _in_thread(body)
    assert seen["moved"] is False and seen["now"] == {seen["cpu"]}


@LINUX_2
def test_a_child_placed_after_the_pin_was_let_go_gets_every_cpu(tmp_path: Path) -> None:
    from engage_sync import cpu_affinity

    def body() -> dict[str, Any]:
        with run_pin("auto", str(tmp_path)) as cpu:
            assert cpu is not None
            child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                     stdin=subprocess.PIPE)  # started pinned: inherits it
            pin = cpu_affinity._pinned
            assert pin is not None
            cpu_affinity.free_pin(pin)
            cpu_affinity.place_child(child.pid)
            cpus = os.sched_getaffinity(child.pid)
            child.communicate(b"")
        return {"child": cpus}

    assert _in_thread(body)["child"] == os.sched_getaffinity(0)


@LINUX_2
def test_a_placed_number_no_longer_a_child_of_the_run_is_never_moved(tmp_path: Path) -> None:
    """A child that exited leaves its number to any process: a grandchild stands in for one
    (its parent is not the run), listed among the placed children."""
    from engage_sync import cpu_affinity

    holder = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen(['sleep', '60']); "
         "print(p.pid, flush=True); sys.stdin.read(); p.kill()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    grandchild = int(holder.stdout.readline())
    before = os.sched_getaffinity(grandchild)
    try:
        def body() -> dict[str, Any]:
            with run_pin("auto", str(tmp_path)) as cpu:
                assert cpu is not None
                pin = cpu_affinity._pinned
                assert pin is not None
                pin.children.append(grandchild)
                other = next(c for c in sorted(pin.allowed) if c != cpu)
                cpu_affinity.move_pin(pin, other, str(tmp_path))
                return {"listed": list(pin.children), "cpus": os.sched_getaffinity(grandchild)}

        seen = _in_thread(body)
    finally:
        holder.communicate("")
    assert seen["cpus"] == before and grandchild not in seen["listed"]


@LINUX_2
def test_a_watcher_that_cannot_start_leaves_the_run_pinned_not_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from engage_sync import cpu_watch

    def no_thread(self: Any) -> Any:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(cpu_watch.Watcher, "start", no_thread)
    caplog.set_level("INFO", logger="engage_sync.cpu")
    seen = _in_thread(lambda: {"pinned": _pinned_in(run_pin("auto", str(tmp_path))),
                               "after": os.sched_getaffinity(0)})
    assert seen["pinned"] is not None and "cannot follow" in caplog.text
    assert len(seen["after"]) > 1


@LINUX_2
def test_a_field_helper_the_run_waits_for_gets_every_cpu_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At `finish` the run waits for its helper: `release_child` gives the helper every CPU
    the run had (its sort then uses them), and the pin no longer moves it."""
    from engage_sync import cpu_affinity
    from engage_sync.diff import helper as helper_module
    from engage_sync.diff.helper import FieldHelper

    cpu = min(os.sched_getaffinity(0))
    events: list[Any] = []  # the spies' record, in order
    monkeypatch.setattr(helper_module, "release_child", lambda pid: events.append(pid))
    enqueue = FieldHelper._enqueue
    monkeypatch.setattr(FieldHelper, "_enqueue",
                        lambda self, obj: (events.append(obj), enqueue(self, obj))[1])

    def body() -> dict[str, Any]:
        first = os.sched_getaffinity(0)
        with run_pin(str(cpu), str(tmp_path)):
            helper = FieldHelper("i", f"sqlite:///{tmp_path / 'state.db'}")
            try:
                pin = cpu_affinity._pinned
                assert pin is not None and helper._proc.pid in pin.children
                cpu_affinity.release_child(helper._proc.pid)
                widened = os.sched_getaffinity(helper._proc.pid)
                kept = helper._proc.pid in pin.children
            finally:
                helper.stop()
            helper = FieldHelper("i", f"sqlite:///{tmp_path / 'state.db'}")
            helper.finish()  # it writes its (no) records: released before it is told to
        return {"first": first, "widened": widened, "kept": kept, "pid": helper._proc.pid}

    seen = _in_thread(body)
    assert seen["widened"] == seen["first"] and not seen["kept"]
    assert events[-3:] == [seen["pid"], helper_module.FINISH, None]  # released, then told


@LINUX_2
def test_the_pin_stops_following_load_once_the_run_waits_for_its_helper(
        tmp_path: Path) -> None:
    """The watcher would read the released helper's work on the run's CPU as another
    process's, and move or let go of the pin: `release_child` stops it first."""
    from engage_sync import cpu_affinity

    def body() -> dict[str, Any]:
        with run_pin("auto", str(tmp_path)) as cpu:
            pin = cpu_affinity._pinned
            if cpu is None or pin is None or pin.watcher is None:
                return {}
            child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                     stdin=subprocess.PIPE)
            try:
                cpu_affinity.place_child(child.pid)
                watching = pin.watcher._thread.is_alive()
                cpu_affinity.release_child(child.pid)
                stopped = not pin.watcher._thread.is_alive()
                cpus = os.sched_getaffinity(child.pid)
            finally:
                child.communicate(b"")
        return {"watching": watching, "stopped": stopped, "cpus": cpus, "pinned": cpu}

    seen = _in_thread(body)
    if not seen:
        pytest.skip("auto pinned nothing here, or the CPUs' load cannot be read")
    assert seen["watching"] and seen["stopped"] and seen["pinned"] in seen["cpus"]
