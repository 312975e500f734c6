"""ENGAGE_SYNC_PIN_CPU: which CPU a setting names (pure), and the pin itself, in a child
interpreter so that the test process is never pinned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engage_sync.cpu_affinity import busy_ticks, candidates, claim_cpu
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
    first[1].close()  # that run ended
    third = claim_cpu([3, 1], str(tmp_path))
    assert third is not None and third[0] == 3
    second[1].close()
    third[1].close()


def test_busy_ticks_leave_out_idle_and_io_wait(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  9 9 9 9 9 9 9 9 9 9\n"
                    "cpu0 10 1 5 1000 7 2 3 0 0 0\n"
                    "cpu1 1 0 1 50 0 0 0 0 0 0\nintr 5 6\n")
    assert busy_ticks(str(stat)) == {0: 21, 1: 2}


CHILD = textwrap.dedent("""
    import json, os, subprocess, sys, threading
    from engage_sync.cpu_affinity import pin_from_env, place_child
    first = os.sched_getaffinity(0)
    cpu = pin_from_env({"ENGAGE_SYNC_PIN_CPU": sys.argv[1]}, sys.argv[2])
    seen = {}
    t = threading.Thread(target=lambda: seen.update(thread=sorted(os.sched_getaffinity(0))))
    t.start(); t.join()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    place_child(child.pid)
    seen.update(cpu=cpu, first=sorted(first), main=sorted(os.sched_getaffinity(0)),
                child=sorted(os.sched_getaffinity(child.pid)),
                again=pin_from_env({"ENGAGE_SYNC_PIN_CPU": "off"}))
    child.kill()
    print(json.dumps(seen))
""")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs")
def test_a_pinned_process_keeps_its_threads_on_the_cpu_and_its_child_on_the_others() -> None:
    cpu = max(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", CHILD, str(cpu), "unused"],
                         capture_output=True, text=True, check=True, timeout=60)
    seen = json.loads(out.stdout)
    assert seen["cpu"] == cpu and seen["main"] == [cpu] and seen["thread"] == [cpu]
    assert seen["child"] == [c for c in seen["first"] if c != cpu]
    assert seen["again"] == cpu  # pinned once, kept: a later `off` does not unpin mid-process
    assert "the run's process is kept on CPU" not in out.stdout  # a log line, not output


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux")
def test_unset_leaves_the_process_and_its_child_where_they_were() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, "off", "unused"], capture_output=True,
                         text=True, check=True, timeout=60)
    seen = json.loads(out.stdout)
    assert seen["cpu"] is None and seen["again"] is None
    assert seen["main"] == seen["thread"] == seen["child"] == seen["first"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs")
def test_two_auto_runs_of_one_host_take_two_cpus_and_a_third_is_not_pinned(
        tmp_path: Path) -> None:
    """Three processes with `auto` at once, each allowed the same two CPUs and holding its
    claim while it lives."""
    hold = textwrap.dedent("""
        import os, sys
        from engage_sync.cpu_affinity import pin_from_env
        os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(",")})
        print(pin_from_env({"ENGAGE_SYNC_PIN_CPU": "auto"}, sys.argv[1]), flush=True)
        sys.stdin.read()  # hold the claim until the test lets go
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
