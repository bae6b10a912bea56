"""The whole suite's runner (scripts/test.sh): the heartbeat that keeps it from going silent
(monky_deployd_testkit.heartbeat, scripts/heartbeat.sh) and the lock that lets the two engines'
passes run at once while a test restarts the second engine (engines.in_use)."""

from __future__ import annotations

import io
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit import engines
from monky_deployd_testkit.heartbeat import QUIET_S, Heartbeat

REPO = Path(__file__).resolve().parents[2]


class _Report:
    def __init__(self, nodeid: str, when: str) -> None:
        self.nodeid, self.when = nodeid, when


def test_the_heartbeat_names_the_oldest_running_tests_once_the_suite_is_quiet() -> None:
    beat = Heartbeat(io.StringIO())
    for name in ("t::a", "t::b", "t::c"):
        beat.pytest_runtest_logstart(name)
    beat.pytest_runtest_logreport(_Report("t::b", "teardown"))  # type: ignore[arg-type]
    now = time.monotonic()
    assert beat.line(now) is None  # something was reported just now
    line = beat.line(now + QUIET_S + 1)
    assert line is not None and "t::a" in line and "t::c" in line and "t::b" not in line
    assert line.index("t::a") < line.index("t::c")  # the longest-running first
    assert beat.line(now + QUIET_S + 2) is None  # said once, then quiet again for QUIET_S


def test_waiting_says_what_it_waits_for_and_keeps_the_commands_output_and_status() -> None:
    nap = 'bash -c "sleep 2.5; echo out; exit 3"'
    script = f'source {REPO}/scripts/heartbeat.sh; waiting "napping" {nap}'
    proc = subprocess.run(
        ("bash", "-c", script), capture_output=True, text=True, env={"HEARTBEAT_S": "1"}
    )
    assert proc.returncode == 3 and proc.stdout == "out\n"
    assert proc.stderr.count("still napping (") >= 2, proc.stderr


@pytest.fixture
def lock_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock's files in tmp_path: never the suite's own (it may be running beside)."""
    monkeypatch.setattr(engines, "LOCK", tmp_path / "lock")
    monkeypatch.setattr(engines, "TURNSTILE", tmp_path / "turnstile")


def _hold(alone: bool, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    def run() -> None:
        with engines.in_use(alone=alone):
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.usefixtures("lock_files")
def test_a_restart_waits_for_the_tests_using_the_engine_and_new_ones_wait_behind_it() -> None:
    r1_in, r1_out = threading.Event(), threading.Event()
    _hold(False, r1_in, r1_out)
    assert r1_in.wait(5)
    r2_in, r2_out = threading.Event(), threading.Event()
    _hold(False, r2_in, r2_out)
    assert r2_in.wait(5)  # tests of the engine share it
    w_in, w_out = threading.Event(), threading.Event()
    _hold(True, w_in, w_out)
    time.sleep(0.3)
    assert not w_in.is_set()  # the restart waits for both
    r3_in, r3_out = threading.Event(), threading.Event()
    _hold(False, r3_in, r3_out)
    r1_out.set()
    r2_out.set()
    assert w_in.wait(5)  # alone once they left, though a new test asked meanwhile
    assert not r3_in.is_set()
    w_out.set()
    assert r3_in.wait(5)  # and the new one runs after it
    r3_out.set()


def test_restart_second_refuses_outside_the_lock() -> None:
    with pytest.raises(RuntimeError, match="second_engine_restart"):
        engines.restart_second()


def test_each_workers_slice_starts_with_its_share_of_the_long_tests() -> None:
    from types import SimpleNamespace

    from tests.conftest import pytest_collection_modifyitems

    def item(nodeid: str) -> Any:
        return SimpleNamespace(nodeid=nodeid, path=Path(nodeid.split("::")[0]))

    names = [
        "tests/unit/a.py::u1", "tests/unit/a.py::u2", "tests/e2e/b.py::e1",
        "tests/system/s.py::s1", "tests/unit/a.py::u3", "tests/e2e/b.py::e2",
        "tests/system/s.py::s2", "tests/system/t.py::t1",
    ]  # fmt: skip
    items = [item(n) for n in names]
    config = SimpleNamespace(workerinput={"workercount": 2})
    pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    order = [i.nodeid.split("::")[1] for i in items]
    # units in rank order: [s1 s2] t1 e1 e2 u1 u2 u3, dealt to two slices
    assert order == ["s1", "s2", "e1", "u1", "u3", "t1", "e2", "u2"]
