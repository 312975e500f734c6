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

from engage_sync.cpu_affinity import busy_ticks, choose_cpu
from engage_sync.errors import ConfigError

ALLOWED = frozenset({0, 1, 2, 3})


def _never() -> dict[int, int]:
    raise AssertionError("only `auto` reads the CPUs' load")


@pytest.mark.parametrize("text", ["", "off", " OFF "])
def test_off_and_unset_pin_nothing(text: str) -> None:
    assert choose_cpu(text, ALLOWED, _never) is None


def test_a_number_names_that_cpu() -> None:
    assert choose_cpu("2", ALLOWED, _never) == 2


@pytest.mark.parametrize(("text", "said"), [
    ("7", "CPU 7 is not one this process may run on (0, 1, 2, 3)"),
    ("first", "must be `off`, `auto` or a CPU number"),
    ("-1", "must be `off`, `auto` or a CPU number"),
])
def test_a_bad_setting_is_a_config_error_naming_the_setting(text: str, said: str) -> None:
    with pytest.raises(ConfigError, match="ENGAGE_SYNC_PIN_CPU") as caught:
        choose_cpu(text, ALLOWED, _never)
    assert said in str(caught.value)


def test_auto_takes_the_cpu_least_busy_between_two_readings() -> None:
    readings = iter([{0: 100, 1: 100, 2: 500, 3: 900}, {0: 180, 1: 130, 2: 510, 3: 990}])
    assert choose_cpu("auto", ALLOWED, lambda: next(readings)) == 2


def test_auto_never_takes_a_cpu_the_process_may_not_use() -> None:
    readings = iter([{0: 0, 1: 0, 5: 0}, {0: 50, 1: 40, 5: 0}])
    assert choose_cpu("auto", frozenset({0, 1}), lambda: next(readings)) == 1


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
    cpu = pin_from_env({"ENGAGE_SYNC_PIN_CPU": sys.argv[1]})
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
    out = subprocess.run([sys.executable, "-c", CHILD, str(cpu)], capture_output=True,
                         text=True, check=True, timeout=60)
    seen = json.loads(out.stdout)
    assert seen["cpu"] == cpu and seen["main"] == [cpu] and seen["thread"] == [cpu]
    assert seen["child"] == [c for c in seen["first"] if c != cpu]
    assert seen["again"] == cpu  # pinned once, kept: a later `off` does not unpin mid-process
    assert "the run's process is kept on CPU" not in out.stdout  # a log line, not output


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux")
def test_unset_leaves_the_process_and_its_child_where_they_were() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, "off"], capture_output=True,
                         text=True, check=True, timeout=60)
    seen = json.loads(out.stdout)
    assert seen["cpu"] is None and seen["again"] is None
    assert seen["main"] == seen["thread"] == seen["child"] == seen["first"]
