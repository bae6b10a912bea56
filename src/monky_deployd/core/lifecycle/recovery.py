"""After a failed or refused apply: roll back or not, hold or back off. Pure: no I/O, no clock.

    failure of revision R                         what happens
    ------------------------------------------    -----------------------------------------------
    the box changed (down, up or verify failed),  rollback: the last-known-good (LKG) release
    an LKG exists, on_failure: rollback           comes back from its pinned images, is verified;
    (the default)                                 R is held (no retry until the desired revision
                                                  changes or ``apply --once --retry``)
    that rollback fails                           R is held *stalled* (ROLLBACK_FAILED): no tick
                                                  applies or rolls back on its own
    refused by the box's policy (POLICY_*,        R is held (no backoff: the same revision under
    but POLICY_UNJUDGED)                          the same policy is refused again) until the
                                                  desired revision or config.yaml's policy changes
    anything else: refused before the box         R is retried with backoff: from one tick
    changed, a pull failed, no LKG yet, or        interval, doubling per attempt, capped,
    on_failure: retry                             jittered (never later than the cap)

A new desired revision pre-empts a hold and a backoff on the very next tick
(``core.lifecycle.decide``).

A **restore** (the applied revision's containers died; ``up`` from its pinned images, then
verify) that fails is not rolled back (it *is* the last-known-good): the tick reports ``failed``
naming the service, and the next restore waits with the same backoff (``after_restore_failure``;
kept in ``held.json`` beside a held revision's record, or alone under the applied revision).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from monky_deployd.core.clock import bounded_end
from monky_deployd.core.errors import Code

if TYPE_CHECKING:  # (read when held.json exists: off the no-op tick's imports)
    from monky_deployd.core.records.held import Held

# the box steps after which the box no longer runs the LKG as it was: a failure there rolls back
CHANGING_PHASES = frozenset({"down", "up", "verify"})
# the policy's verdicts on a revision: the same under the same policy (POLICY_UNJUDGED is
# compose failing to read it: a plugin upgrade may change that, so it backs off)
POLICY_VERDICTS = frozenset(
    {
        Code.POLICY_REFUSED,
        Code.POLICY_PROTECTED_PATH,
        Code.POLICY_SOURCE,
        Code.POLICY_UNKNOWN_KEY,
        Code.POLICY_FOREIGN_RESOURCE,  # the engine's word: after a volume is removed, --retry
        Code.POLICY_HOST_STRING,
        Code.POLICY_RESOURCE_DRIFT,  # the engine's word too: after the volume is removed, --retry
    }
)


def backoff_delay(attempts: int, base_s: float, cap_s: float, jitter: float, u: float) -> float:
    """Seconds before attempt ``attempts + 1``: ``base_s * 2**(attempts-1)`` capped at ``cap_s``,
    shortened by up to ``jitter`` (a fraction) times ``u`` (uniform in [0, 1), the caller's)."""
    n = max(1, attempts)
    delay = min(cap_s, base_s * 2.0 ** min(n - 1, 64))
    return delay * (1.0 - jitter * min(max(u, 0.0), 1.0))


@dataclass(frozen=True)
class Recovery:
    """What to do after a failed apply of ``revision``."""

    rollback_to: str | None  # the LKG revision to restore, or None
    held: Held  # the record to keep (its next_attempt_at is set after a rollback's outcome)


def after_failure(
    *,
    revision: str,
    code: Code,
    message: str,
    failed_phase: str,
    lkg: str | None,
    on_failure: str,
    previous: Held | None,
    now: float,
    base_s: float,
    cap_s: float,
    jitter: float,
    u: float,
    policy: str = "",
) -> Recovery:
    """Roll back (and hold) or back off, from where the apply failed and what the box has. A
    rollback's record is ``RollbackPending``: it is stored before the rollback starts. A policy
    verdict is held as ``Refused`` under ``policy`` (the digest of config.yaml's policy)."""
    from monky_deployd.core.records.held import BackingOff, Refused, RollbackPending, restore_wait

    attempts = previous.attempts + 1 if previous and previous.revision == revision else 1
    if code in POLICY_VERDICTS:
        wait = restore_wait(previous) if previous and previous.revision == revision else None
        return Recovery(None, Refused(revision, code.value, message, policy, attempts, now, wait))
    rollback = (
        failed_phase in CHANGING_PHASES
        and lkg is not None
        and lkg != revision
        and on_failure != "retry"
    )
    if rollback:
        assert lkg is not None
        return Recovery(lkg, RollbackPending(revision, code.value, message, lkg, attempts, now))
    next_at = now + backoff_delay(attempts, base_s, cap_s, jitter, u)
    changed = failed_phase in CHANGING_PHASES
    held = BackingOff(revision, code.value, message, next_at, attempts, now, changed)
    return Recovery(None, held)


def rollback_pending(held: Held | None, lkg: str) -> bool:
    """The failure is recorded and its rollback to ``lkg`` started (or was stopped by a lock or
    a suspend) but never ended: the next tick finishes it (a restore of ``lkg``, pinned)."""
    from monky_deployd.core.records.held import RollbackPending

    return isinstance(held, RollbackPending) and held.rolled_back_to == lkg


def after_rollback(held: Held, ok: bool) -> Held:
    """The held record once the rollback ran: held either way; stalled when it failed."""
    from monky_deployd.core.records.held import HeldRevision, RollbackPending, Stalled

    to = held.rolled_back_to if isinstance(held, RollbackPending | HeldRevision | Stalled) else None
    if ok:
        return HeldRevision(
            held.revision, held.code, held.message, held.attempts, held.failed_at, to
        )
    return Stalled(held.revision, held.code, held.message, held.attempts, held.failed_at, to)


def after_restore_failure(
    held: Held | None,
    *,
    applied: str,
    code: Code,
    message: str,
    now: float,
    base_s: float,
    cap_s: float,
    jitter: float,
    u: float,
) -> Held:
    """The record after a failed restore of the ``applied`` revision: a held revision's record
    keeps its hold and gains the restore's backoff; otherwise a record of the applied revision
    that holds nothing but that backoff."""
    from monky_deployd.core.records.held import (
        BackingOff,
        HeldRevision,
        Refused,
        RestoreBackoff,
        RestoreWait,
        restore_wait,
    )

    before = restore_wait(held)
    attempts = (before.attempts if before is not None else 0) + 1
    wait = RestoreWait(attempts, now + backoff_delay(attempts, base_s, cap_s, jitter, u))
    if isinstance(held, HeldRevision | BackingOff | Refused) and held.revision != applied:
        return replace(held, restore=wait)
    return RestoreBackoff(applied, code.value, message, wait, now)


def after_restore(held: Held | None, applied: str) -> Held | None:
    """The record once the applied revision runs again (restored and verified, or found
    running): the restore's backoff is forgotten (None: no record stays)."""
    if held is None:
        return None
    from monky_deployd.core.records.held import BackingOff, HeldRevision, Refused, RestoreBackoff

    if held.revision == applied or isinstance(held, RestoreBackoff):
        return None
    if isinstance(held, HeldRevision | BackingOff | Refused) and held.restore is not None:
        return replace(held, restore=None)
    return held


def bounded(held: Held | None, now: float, cap_s: float) -> Held | None:
    """The record with its waits bounded against ``now`` (``core.clock``): a next attempt or a
    next restore at most ``cap_s`` away, and at most the wait it was written with (after a
    clock step back, ``failed_at`` lies in the future, and is brought back to now). The same
    record when nothing moves; another one is to be stored, so the bound holds on later ticks
    (each tick's bound counts from its own clock)."""
    if held is None:
        return None
    from monky_deployd.core.records.held import (
        BackingOff,
        HeldRevision,
        Refused,
        RestoreBackoff,
        RestoreWait,
    )

    out = held
    if (
        isinstance(out, HeldRevision | BackingOff | RestoreBackoff | Refused)
        and out.restore is not None
    ):
        wait = out.restore
        next_at = bounded_end(held.failed_at, wait.next_at, now, cap_s)
        if next_at != wait.next_at:
            out = replace(out, restore=RestoreWait(wait.attempts, next_at))
    if isinstance(out, BackingOff):
        next_at = bounded_end(held.failed_at, out.next_attempt_at, now, cap_s)
        if next_at != out.next_attempt_at:
            out = replace(out, next_attempt_at=next_at)
    if held.failed_at > now:  # a failure is never recorded in the future
        out = replace(out, failed_at=now)
    return out


def checkin_outcome(held: Held | None) -> str:
    """``applied.outcome`` of the check-in (contract v1.1): ``rolled_back`` while a failed
    revision is held after the LKG came back, ``held`` while one waits (backoff, a pending
    rollback, stalled)."""
    if held is None:
        return "applied"
    from monky_deployd.core.records.held import HeldRevision

    if isinstance(held, HeldRevision) and held.rolled_back_to is not None:
        return "rolled_back"
    return "held"
