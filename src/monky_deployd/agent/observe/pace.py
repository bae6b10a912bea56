"""A new revision's pace on this box: update windows and the rollout spread
(``core.lifecycle.schedule`` decides, ``core.lifecycle.decide`` turns it into ``Waiting``); this
module keeps ``waiting.json`` and says in the journal what the box waits for.

    before the check-in   ``agent.observe.observe.read_local``: the record (none once its revision
    is
                          the applied one)
    the check-in          ``checkin_ref``: ``applied.outcome: waiting`` and ``waiting`` while
                          the last tick waited (contract v1.2)
    after the plan        ``keep``: the first sight of a new revision (kept while it waits, is
                          applied, held or backs off), the wait's end and why while the plan is
                          ``Waiting``; removed when nothing new is pending
    a ``Waiting`` plan    ``wait``: the tick's record (outcome ``waiting``, exit 7) and one INFO
                          line saying when the box applies
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle.decide import Noop
from monky_deployd.core.records.tickrecord import TickRecord, rfc3339
from monky_deployd.core.wire import checkin as wire

if TYPE_CHECKING:  # (read when a revision waits or windows are set: off the no-op's imports)
    from monky_deployd.core.lifecycle import schedule
    from monky_deployd.core.lifecycle.decide import Plan
    from monky_deployd.core.lifecycle.plans import Waiting

log = logging.getLogger("monky_deployd")


def checkin_ref(stored: schedule.Seen | None) -> wire.WaitingRef | None:
    """The check-in's ``waiting`` while the last tick waited (the first tick that waits checks
    in before it decides: tenancy hears of the wait one tick later)."""
    if stored is None or stored.until is None or stored.why is None:
        return None
    return wire.WaitingRef(
        revision=stored.revision, until=rfc3339(stored.until, "seconds"), why=stored.why
    )


def keep(
    state: StateDir, stored: schedule.Seen | None, on_disk: schedule.Seen | None, plan: Plan
) -> None:
    """Write what the plan says of the new revision (``stored``: waiting.json unless it is of
    the applied revision; ``on_disk``: as it is), only when the file changes."""
    if stored is None and on_disk is None and isinstance(plan, Noop):
        return  # nothing waits or waited (a no-op): below, ``after`` would be None too
    from monky_deployd.core.lifecycle import schedule
    from monky_deployd.core.lifecycle.plans import Apply, Backoff, Hold, Paused, Restore, Waiting

    if stored is None and on_disk is None and not isinstance(plan, Waiting | Restore | Apply):
        return

    if isinstance(plan, Waiting | Restore) and plan.gate is not None:  # (a restore meanwhile)
        g = plan.gate
        after: schedule.Seen | None = schedule.Seen(
            g.revision, g.first_seen_at, g.until, g.why, g.spread_s
        )
    elif isinstance(plan, Apply) and plan.gate is not None:
        g = plan.gate
        after = schedule.Seen(g.revision, g.first_seen_at, spread_s=g.spread_s)
    elif isinstance(plan, Hold | Backoff | Paused) and stored is not None:  # held, not waiting
        after = schedule.Seen(stored.revision, stored.first_seen_at, spread_s=stored.spread_s)
    else:  # nothing new waits (idle, no-op, restore, a forced apply)
        after = None
    if after == on_disk:
        return
    if after is None:
        state.clear_waiting()
    else:
        state.write_waiting(after)


def wait(rec: TickRecord, plan: Waiting) -> None:
    """No apply this tick: the record says why and until when; one INFO line."""
    g = plan.gate
    rec.revision = plan.revision
    rec.outcome = "waiting"
    rec.code = Code.WINDOW_CLOSED if g.why == "window" else Code.ROLLOUT_WAIT
    until = rfc3339(g.until, "seconds") if g.until is not None else None
    rec.message = f"{plan.reason}; applies at {until} (or `apply --once --retry` now)"
    log.info(
        rec.message,
        extra={
            "event": "plan.waiting",
            "phase": "plan",
            "why": g.why,
            "until": until,
            "next_window_at": rfc3339(g.windows.opens_at, "seconds")
            if g.windows.opens_at is not None
            else None,
            "rollout_offset_s": round(g.offset_s) if g.spread_s else None,
            "canary": g.canary,
        },
    )


def plan_notes(plan: Plan, windows: tuple[schedule.Window, ...], now: float) -> list[str]:
    """``plan``'s lines on the update windows and on when this box applies a new revision."""
    notes = []
    if windows:
        from monky_deployd.core.lifecycle import schedule

        state = schedule.window_state(windows, now)
        if state.open:
            notes.append(
                f"update windows: inside {state.window} until "
                f"{rfc3339(state.closes_at or now, 'seconds')}"
            )
        else:
            notes.append(
                f"update windows: closed; {state.window} opens at "
                f"{rfc3339(state.opens_at or now, 'seconds')}"
            )
    from monky_deployd.core.lifecycle.plans import Apply, Restore, Waiting

    g = plan.gate if isinstance(plan, Apply | Waiting | Restore) else None
    if g is not None and g.spread_s:
        notes.append(
            f"rollout: this box's place is {g.offset_s:.0f} s of {g.spread_s} s after it first "
            f"saw {g.revision} ({rfc3339(g.first_seen_at, 'seconds')})"
            + (", a canary" if g.canary else "")
            + f"; due at {rfc3339(g.due_at, 'seconds')}"
        )
    if g is not None and g.until is not None:
        notes.append(f"this box applies {g.revision} at {rfc3339(g.until, 'seconds')}")
    return notes
