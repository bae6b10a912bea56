"""A pytest plugin (``-p monky_deployd_testkit.heartbeat``, pyproject's addopts): the suite is
never silent for more than ``QUIET_S`` seconds. When nothing was reported for that long, one line
on the real stderr names the tests still running and for how long::

    [09:41:07] still running: tests/system/test_systemd.py::test_timer (212 s), ...

Under pytest-xdist it runs in the controller, which hears every worker's test start and finish
(the workers themselves stay quiet). It writes to a duplicate of file descriptor 2 taken when the
plugin is imported (``-p`` plugins load before pytest starts capturing), so a test's captured
output never swallows it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import IO

import pytest

QUIET_S = 25.0
SHOWN = 4  # the longest-running tests named on one line

_err: IO[str] = os.fdopen(os.dup(2), "w", buffering=1)


class Heartbeat:
    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def pytest_sessionstart(self) -> None:
        self._thread.start()

    def pytest_sessionfinish(self) -> None:
        self._stop.set()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        with self._lock:
            self._running[nodeid] = self._last = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        with self._lock:
            self._last = time.monotonic()
            if report.when == "teardown":
                self._running.pop(report.nodeid, None)

    def line(self, now: float) -> str | None:
        """The line to print at ``now``, or None while the suite is not quiet."""
        with self._lock:
            if now - self._last < QUIET_S:
                return None
            self._last = now
            oldest = sorted(self._running.items(), key=lambda kv: kv[1])[:SHOWN]
            more = len(self._running) - len(oldest)
        names = ", ".join(f"{nodeid} ({now - started:.0f} s)" for nodeid, started in oldest)
        tail = f" and {more} more" if more > 0 else ""
        return f"still running: {names or 'no test (collecting, or a session fixture)'}{tail}"

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            text = self.line(time.monotonic())
            if text is not None:
                self._out.write(f"\n[{time.strftime('%H:%M:%S')}] {text}\n")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # an xdist worker: its controller reports
        config.pluginmanager.register(Heartbeat(_err), "monky-heartbeat")
