"""A movable clock shared by the fakes, so tests can make tokens, grants and budgets expire."""

from __future__ import annotations

import threading
import time


class Clock:
    """Seconds since the epoch as the fakes see them.

    Frozen by default (time moves only through `advance`), so tests are deterministic.
    `ticking=True` also follows real time (serve.py: a demo's tokens age and its lease budget
    window rolls); `advance` still jumps ahead.
    """

    def __init__(self, start: float | None = None, *, ticking: bool = False) -> None:
        self._lock = threading.Lock()
        self._base = time.time() if start is None else float(start)
        self._ticking = ticking
        self._mono0 = time.monotonic()

    def now(self) -> float:
        with self._lock:
            now = self._base
            if self._ticking:
                now += time.monotonic() - self._mono0
            return now

    def advance(self, seconds: float) -> float:
        """Move time forward by `seconds`; returns the new time."""
        if seconds < 0:
            raise ValueError("a Clock only moves forward")
        with self._lock:
            self._base += seconds
        return self.now()
