"""Measure child processes honestly: wall time, CPU (user+sys) and peak RSS.

Linux carries a process's peak RSS across ``fork``+``exec`` (``ru_maxrss`` of a child is at
least its parent's at the fork), so a child started by a benchmark that has loaded the fakes
would report the benchmark's size. ``Launcher`` starts one small Python process first and has it
fork and exec every measured command, so a child's peak RSS is its own (at least that small
launcher's, about 10 MiB: less than any Python start).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import NamedTuple

_LAUNCHER = r"""
import json, os, sys, time
for line in sys.stdin:
    req = json.loads(line)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(os.devnull, os.O_RDWR)
            os.dup2(fd, 0); os.dup2(fd, 1)
            if not req.get("stderr"):
                os.dup2(fd, 2)
            os.execve(req["argv"][0], req["argv"], req["env"])
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    wall = (time.perf_counter() - started) * 1000
    print(json.dumps([wall, (ru.ru_utime + ru.ru_stime) * 1000, ru.ru_maxrss / 1024,
                      os.waitstatus_to_exitcode(status)]), flush=True)
"""


class Row(NamedTuple):
    wall_ms: float
    cpu_ms: float
    rss_mib: float
    rc: int


class Launcher:
    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            (sys.executable, "-I", "-S", "-c", _LAUNCHER),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, argv: tuple[str, ...], env: dict[str, str]) -> Row:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"argv": list(argv), "env": env}) + "\n")
        self._proc.stdin.flush()
        wall, cpu, rss, rc = json.loads(self._proc.stdout.readline())
        return Row(wall, cpu, rss, int(rc))

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=10)

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
