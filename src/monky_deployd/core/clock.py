"""Stored times against a clock that steps (a bad RTC before NTP, a VM restored from a
snapshot). PURE: every function takes ``now`` from its caller.

A time the agent stored (a backoff's next attempt, a suspend's end, an update lock's expiry)
was computed from the clock of the tick that wrote it. When the clock steps back, "until then"
grows by the step: a backoff of 60 s written a day ahead would wait a day and a minute. The
rule here, for every stored wait:

- a wait is never longer than its cap (``backoff.cap_s``, the lock TTL, the suspend's own
  duration), counted from now;
- a start time in the future (the clock went back since it was written) counts from now: the
  wait that is left is at most the whole wait it was written with.

So a clock step back never stretches a wait, and a step forward ends it early at worst (never
later than it would have ended). ``suspect_future`` says when a stored time is ahead of now by
more than the tolerance (``status``: the clock stepped back since that tick, or that tick's
clock was ahead).
"""

from __future__ import annotations

import math

# clocks of one box agree within this (a tick takes seconds; NTP slews a few ms)
FUTURE_TOLERANCE_S = 120.0


def bounded_end(start: float, end: float, now: float, cap_s: float) -> float:
    """The end of a stored wait (written as ``start`` .. ``end``) as seen at ``now``: never
    more than ``cap_s`` nor more than the wait it was written with (``end - start``) from now.
    A wait already over (``end <= now``) stays over."""
    if not (math.isfinite(end) and math.isfinite(now)):
        return now
    if end <= now:
        return end
    whole = end - start if math.isfinite(start) and start <= end else cap_s
    left = min(end - now, max(0.0, cap_s), max(0.0, whole))
    return now + left


def bounded_until(end: float, now: float, cap_s: float) -> float:
    """``end`` (a stored next attempt) at most ``cap_s`` from ``now``."""
    if not (math.isfinite(end) and math.isfinite(now)):
        return now
    return min(end, now + max(0.0, cap_s))


def suspect_future(at: float, now: float, tolerance_s: float = FUTURE_TOLERANCE_S) -> bool:
    """A stored time further ahead of ``now`` than the tolerance: written by a clock that was
    ahead, or the clock stepped back since."""
    return math.isfinite(at) and at - now > tolerance_s
