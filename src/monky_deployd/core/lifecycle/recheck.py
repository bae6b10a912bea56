"""Locks and suspend looked at again right before a container is changed. PURE.

The plan reads the update locks and ``suspend.json`` once, at plan time; a pull can take
minutes, and an app may take a lock (a migration starts) or an operator run ``monky-deployd
suspend`` meanwhile. So every box step that changes containers (``Down``, ``Up``, ``Rollback``)
asks ``before_change`` first, with the locks and the suspend read at that moment:

    what       a valid update lock            an active suspend
    apply      UPDATE_LOCKED: nothing changes  SUSPENDED: nothing changes
    restore    (not blocked: as at plan time)  SUSPENDED
    rollback   UPDATE_LOCKED: rollback pending SUSPENDED: rollback pending

A blocked apply or restore ends the tick as the plan-time gate does (held, exit 6, no report;
the pulled images stay for the next tick). A blocked rollback leaves the failed revision
recorded with its rollback pending (``held.json``): the first tick the gate lets through
finishes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle.gates import Lock, summary
from monky_deployd.core.records.suspend import Suspended

What = Literal["apply", "restore", "rollback"]


@dataclass(frozen=True)
class Blocked:
    """The change may not happen now: its code (UPDATE_LOCKED or SUSPENDED) and why."""

    code: Code
    reason: str


def before_change(
    what: What,
    revision: str,
    step: str,
    locks: tuple[Lock, ...],
    suspended: Suspended | None,
    now: float,
) -> Blocked | None:
    """Whether ``step`` (down, up, rollback) of ``what`` for ``revision`` may run now."""
    verb = {"apply": "applying", "restore": "restoring", "rollback": "rolling back to"}[what]
    if suspended is not None and suspended.active(now):
        return Blocked(
            Code.SUSPENDED,
            f"{suspended.describe()} since the plan: not {verb} {revision} ({step} not run)",
        )
    if locks and what != "restore":
        held = summary(locks, now)
        return Blocked(
            Code.UPDATE_LOCKED,
            f"update locked since the plan ({held}): not {verb} {revision} ({step} not run)",
        )
    return None
