"""Locks and suspend read again right before a box step changes containers
(``core.lifecycle.recheck``).

``agent.apply.steps.run`` calls ``check`` before each ``Down``, ``Up`` and ``Rollback`` of an apply,
a restore or a rollback (never before ``Stage``, ``Pull``, ``Verify`` or ``Commit``: they change
no container). It reads the update-lock directory and ``suspend.json`` as the plan did, at this
moment, and raises ``Gated`` (UPDATE_LOCKED or SUSPENDED) when the step may not run: the tick
then ends as a plan-time lock or suspend ends it (held, exit 6), and a rollback stays pending.
"""

from __future__ import annotations

import logging

from monky_deployd.adapters.box import locks
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.config import Config
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle import gates, recheck

log = logging.getLogger("monky_deployd")


class Gated(DeployError):
    """A box step that changes containers was not run: a lock or a suspend since the plan."""


def check(
    cfg: Config, state: StateDir, what: recheck.What, revision: str, step: str, now: float
) -> None:
    """Raise ``Gated`` when an update lock or a suspend, read now, stops ``step``."""
    lk = cfg.locks
    valid, _ = gates.split_locks(locks.read_locks(lk.dir), now, lk.default_ttl_s, lk.max_ttl_s)
    found = state.read_suspend()
    suspended = found.bounded(now) if found is not None else None
    blocked = recheck.before_change(what, revision, step, valid, suspended, now)
    if blocked is None:
        return
    hint = (
        "`monky-deployd status`; `monky-deployd resume`"
        if suspended is not None and suspended.active(now)
        else "`monky-deployd lock list`; the app holding the lock"
    )
    log.warning(
        blocked.reason,
        extra={"event": "gate.blocked", "code": blocked.code, "what": what, "step": step},
    )
    raise Gated(blocked.reason, code=blocked.code, hint=hint)
