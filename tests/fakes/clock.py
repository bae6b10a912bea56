"""A movable clock shared by the fakes, so tests can make tokens and grants expire."""

from __future__ import annotations

import threading
import time


class Clock:
    """Wall-clock seconds that only move when a test says so (plus the start offset)."""

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        self._now = time.time() if start is None else float(start)

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by `seconds`; returns the new time."""
        if seconds < 0:
            raise ValueError("a Clock only moves forward")
        with self._lock:
            self._now += seconds
            return self._now
