"""Decide what a tick does, from facts. Pure: no I/O, no clock.

``decide(Facts) -> Idle | Noop | Restore | Apply | Hold | Backoff | Paused | Waiting``: what
the tick is for, a frozen dataclass that carries its data (balena-supervisor's manner), from the
check-in answer, the applied record (= the last-known-good revision, LKG), a held failed
revision and its backoff, (when the desired revision is the applied one) the project's
containers, and for a new revision its gate (``core.lifecycle.schedule``: update windows, rollout
spread).

Once every check of an apply or a restore has passed (``core.admission.prepare``),
``core.lifecycle.boxsteps`` lists the steps that change the box, each naming its phase;
``agent.apply.steps`` carries them out.

The facts it decides from are ``core.lifecycle.facts``'; the kinds other than ``Noop`` (a
steady tick never meets them) are ``core.lifecycle.plans``', imported inside the rules that build
them (off the no-op's imports, issue 29). Each rule is a short function of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from monky_deployd.core.lifecycle import jobs as lifecycle
from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
from monky_deployd.core.lifecycle.recovery import rollback_pending
from monky_deployd.core.lifecycle.services import ServiceState, foreign, orphans

if TYPE_CHECKING:  # (read when a revision waits or windows are set: off the no-op's imports)
    from monky_deployd.core.lifecycle import schedule
    from monky_deployd.core.lifecycle.plans import Apply as Apply
    from monky_deployd.core.lifecycle.plans import Backoff as Backoff
    from monky_deployd.core.lifecycle.plans import Hold as Hold
    from monky_deployd.core.lifecycle.plans import Idle as Idle
    from monky_deployd.core.lifecycle.plans import Paused as Paused
    from monky_deployd.core.lifecycle.plans import Restore as Restore
    from monky_deployd.core.lifecycle.plans import Stop as Stop
    from monky_deployd.core.lifecycle.plans import Waiting as Waiting

# -- what the tick is for ----------------------------------------------------------------------


@dataclass(frozen=True)
class Noop:
    """The desired revision is applied and every service runs: check in, exit."""

    applied: AppliedFacts
    reason: str
    kind: ClassVar[str] = "noop"


if TYPE_CHECKING:
    Plan = Idle | Noop | Restore | Stop | Apply | Hold | Backoff | Paused | Waiting

# steps after which a killed tick may have left another revision's containers behind
INTERRUPTING = frozenset({"down", "up", "verify", "rollback"})


def needs_container_check(
    checkin_status: int,
    desired: str | None,
    applied: str | None,
    held: str | None = None,
    may_wait: bool = False,
) -> bool:
    """Whether the tick must look at the containers before deciding: the desired revision is
    the applied one, or it is held, or it may wait (``may_wait``: update windows are set or the
    bundle has a rollout spread); then the last-known-good must still run."""
    if checkin_status == 304:
        return applied is not None
    if checkin_status != 200 or desired is None:
        return False
    return desired == applied or (applied is not None and (desired == held or may_wait))


def down_services(
    expected: tuple[str, ...], running: tuple[ServiceState, ...], jobs: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """Services of ``expected`` not running as they should (``core.lifecycle.jobs``): no running
    container, or an unhealthy one; a job of ``jobs`` that exited 0 is done, not down."""
    states = lifecycle.service_states(
        expected, jobs, ((s.name, s.state, s.health, s.exit_code) for s in running)
    )
    return tuple(n for n in expected if states[n] not in ("ok", "done", "starting"))


def decide(f: Facts) -> Plan:
    plan = _decide(f)
    if f.suspended is None:
        return plan
    from monky_deployd.core.lifecycle.plans import Apply, Paused, Restore

    if isinstance(plan, Apply | Restore):
        what = "apply" if isinstance(plan, Apply) else "restore"
        rev = plan.revision if isinstance(plan, Apply) else plan.applied.revision
        return Paused(rev, f.suspended, f"{f.suspended.describe()}: not {what}ing {rev}")
    return plan


def _desired(f: Facts) -> str | None:
    if f.checkin_status == 304:  # not modified: the desired revision is the applied one
        return f.applied.revision if f.applied else None
    return f.desired_revision if f.checkin_status != 204 else None


# -- the decision table: each rule sees the facts and the desired revision; the first that
# answers decides (``_decide``). Rules for a revision the box does not run come first, then
# those for the applied revision. --------------------------------------------------------------

Rule = Callable[[Facts, str], "Plan | None"]


def _pending_rollback(f: Facts, desired: str) -> Plan | None:
    """The desired revision failed and its rollback was recorded but never ended (a killed
    tick, or a lock or suspend that stopped it): finish it, never apply the revision again."""
    held, applied = f.held, f.applied
    if held is None or applied is None or held.revision != desired or f.retry:
        return None
    if desired == applied.revision or not rollback_pending(held, applied.revision):
        return None
    from monky_deployd.core.lifecycle.plans import Restore

    return Restore(
        applied,
        applied.services,
        f"revision {desired} failed ({held.code}) and its rollback to {applied.revision} did "
        f"not finish: rolling back to {applied.revision} (pinned, no pull)",
        rollback_of=desired,
    )


def _held_revision(f: Facts, desired: str) -> Plan | None:
    """The desired revision failed here before: restore the LKG, hold, back off, or retry."""
    held, applied = f.held, f.applied
    if held is None or held.revision != desired or f.retry:
        return None
    if applied is not None and desired == applied.revision:
        return None
    was = applied.revision if applied else "(none)"
    lkg = f"the box runs {was}" if applied else "nothing was applied before"
    missing = (
        down_services(applied.services, f.running, applied.jobs)
        if applied is not None and f.running is not None
        else ()
    )
    from monky_deployd.core.lifecycle.plans import Backoff, Hold, Restore
    from monky_deployd.core.records.held import BackingOff, Refused, Stalled  # (held.json exists)

    box_changed = isinstance(held, BackingOff) and held.box_changed
    if applied is not None and missing and not (isinstance(held, Stalled) or box_changed):
        return _restore_backoff(f, applied, missing) or Restore(
            applied,
            missing,
            f"revision {desired} is held and the last-known-good {was} is not fully "
            f"running ({', '.join(missing)}): restoring {was}",
        )
    if isinstance(held, Stalled):
        return Hold(
            desired,
            held,
            f"revision {desired} failed ({held.code}) and the rollback to "
            f"{held.rolled_back_to} failed too: stalled until the desired revision "
            "changes or `apply --once --retry`",
        )
    if isinstance(held, Refused):
        return Hold(
            desired,
            held,
            f"revision {desired} is held: this box's policy refused it ({held.code}); it is "
            "judged again when the desired revision or config.yaml's policy changes, or on "
            f"`apply --once --retry`; {lkg}",
        )
    if not isinstance(held, BackingOff):
        return Hold(
            desired,
            held,
            f"revision {desired} is held: it failed ({held.code}) and was rolled back; "
            f"{lkg}; it is applied again when the desired revision changes or on "
            "`apply --once --retry`",
        )
    if f.now < held.next_attempt_at:
        return Backoff(
            desired,
            held,
            held.next_attempt_at,
            f"revision {desired} failed {held.attempts} time(s) ({held.code}); "
            f"next attempt in {held.next_attempt_at - f.now:.0f} s; {lkg}",
        )
    return _gated(f, desired, f"revision {desired}: attempt {held.attempts + 1} after {held.code}")


def _new_revision(f: Facts, desired: str) -> Plan | None:
    applied = f.applied
    if applied is not None and desired == applied.revision:
        return None
    was = applied.revision if applied else "(none)"
    reason = f"desired revision {desired} differs from applied {was}"
    if f.held is not None and f.held.revision == desired:
        reason += " (operator retry)"
    return _gated(f, desired, reason)


def _killed_tick(f: Facts, desired: str) -> Plan | None:
    """A killed tick may have left another revision's containers (a killed rollback names the
    revision it restores: its up may not have finished)."""
    cut, applied = f.interrupted, f.applied
    if cut is None or applied is None or cut.phase not in INTERRUPTING:
        return None
    if cut.revision == desired and cut.phase != "rollback":
        return None
    from monky_deployd.core.lifecycle.plans import Restore

    return Restore(
        applied,
        applied.services,
        f"a tick was killed during {cut.phase} of revision {cut.revision}: bringing the "
        f"last-known-good {desired} back (pinned, no pull)",
    )


def _moved_paths(f: Facts, desired: str) -> Plan | None:
    """A held host path of the applied revision leads elsewhere now, or a container can now
    write on its way: its services stopped, never restored while it lasts (before ``_drift``).
    ``--retry`` (the operator checked the path): not stopped; the restore judges it anew and
    holds it as its up finds it."""
    applied = f.applied
    if not f.moved or applied is None or f.retry:
        return None
    from monky_deployd.core.lifecycle.plans import Stop

    named = {service for service, _ in f.moved}
    every = applied.declared or applied.services
    services = every if "" in named else tuple(s for s in every if s in named)
    up = {s.name for s in f.running or () if s.state in ("running", "restarting", "paused")}
    stop = tuple(s for s in services if s in up)
    why = "; ".join(w for _, w in f.moved)
    return Stop(
        applied,
        services,
        stop,
        f.moved,
        f"revision {desired}: {', '.join(services)} stopped: a host path it mounts no longer "
        f"leads where it did at its up: {why}",
    )


def _moved_paths_first(f: Facts, desired: str) -> Plan | None:
    """``_moved_paths`` before the rules for a revision the box does not run, unless they
    apply a revision now (its up replaces the containers, judged anew): a held, backing-off
    or waiting (update window, rollout spread) desired revision, a pending rollback, never
    keep the applied revision's moved paths mounted (the outside attack on issue 45: tenancy
    asked a revision the box refuses, and every tick said REVISION_HELD while a writer swapped
    the applied revision's held path)."""
    applied = f.applied
    if not f.moved or applied is None or desired == applied.revision or f.retry:
        return None
    from monky_deployd.core.lifecycle.plans import Apply

    for rule in (_pending_rollback, _held_revision, _new_revision):
        plan = rule(f, desired)
        if plan is not None:
            return None if isinstance(plan, Apply) else _moved_paths(f, desired)
    return _moved_paths(f, desired)


def _unknown_containers(f: Facts, desired: str) -> Plan | None:
    if f.running is not None:
        return None
    return _apply(f, desired, f"revision {desired}: container state unknown")


def _drift(f: Facts, desired: str) -> Plan | None:
    applied = f.applied
    assert applied is not None and f.running is not None
    missing = down_services(applied.services, f.running, applied.jobs)
    other = foreign(applied.made_by, f.running)
    strays = orphans(applied.declared, f.running) if applied.declared else ()
    if not missing and not other and not strays:
        return None
    facts = [f"{', '.join(missing)} not running (stopped, exited or unhealthy)"] if missing else []
    facts += [
        f"{name}'s container was made by {made} (its labels), applied.json names "
        f"{applied.made_by[name]}"
        for name, made in other
    ]
    facts += [f"{', '.join(strays)} not in revision {desired} (orphans)"] if strays else []
    down = tuple(dict.fromkeys([*missing, *(name for name, _ in other)]))
    from monky_deployd.core.lifecycle.plans import Restore

    return _restore_backoff(f, applied, down or strays) or Restore(
        applied,
        down,
        f"revision {desired} is applied but {'; '.join(facts)}",
        orphans=strays,
        foreign=tuple(name for name, _ in other),
    )


def _steady(f: Facts, desired: str) -> Plan | None:
    assert f.applied is not None
    return Noop(f.applied, f"revision {desired} is applied and all services are running")


DECISIONS: tuple[Rule, ...] = (
    _moved_paths_first,  # the applied revision's moved paths, while the desired one is held
    _pending_rollback,  # a revision that is not applied ...
    _held_revision,
    _new_revision,
    _killed_tick,  # ... the applied revision
    _moved_paths,
    _unknown_containers,
    _drift,
    _steady,
)


def _decide(f: Facts) -> Plan:
    desired = _desired(f)
    if desired is None:
        from monky_deployd.core.lifecycle.plans import Idle

        if f.checkin_status == 204:
            return Idle("tenancy has no desired state for this environment yet")
        return Idle("tenancy named no desired revision")
    for rule in DECISIONS:
        if (plan := rule(f, desired)) is not None:
            return plan
    raise AssertionError("_steady always answers")  # pragma: no cover


def _restore_backoff(f: Facts, applied: AppliedFacts, missing: tuple[str, ...]) -> Backoff | None:
    """A Backoff while the applied revision's last restore failed and its next one is not due
    (``core.lifecycle.recovery.after_restore_failure``); ``--retry`` restores at once."""
    held = f.held
    if held is None:
        return None
    from monky_deployd.core.lifecycle.plans import Backoff
    from monky_deployd.core.records.held import restore_wait  # (held.json exists)

    wait = restore_wait(held)
    if wait is None or f.retry or f.now >= wait.next_at:
        return None
    return Backoff(
        f.desired_revision or applied.revision,
        held,
        wait.next_at,
        f"restoring revision {applied.revision} ({', '.join(missing)} not running) failed "
        f"{wait.attempts} time(s)"
        + (f" ({held.code})" if held.revision == applied.revision else "")
        + f"; next restore in {wait.next_at - f.now:.0f} s",
    )


def _gated(f: Facts, revision: str, reason: str) -> Plan:
    """A new revision: applied once its rollout place is due and a window is open
    (``core.lifecycle.schedule.gate``), at once on ``--retry`` (the operator's "now"). A box with
    nothing applied has nothing a window protects: its first revision waits for its rollout place
    only. A malformed ``rollout`` does not wait: the apply's bundle check refuses it now."""
    from monky_deployd.core.lifecycle import schedule
    from monky_deployd.core.lifecycle.plans import Restore, Waiting

    if f.bundle is None or f.retry or schedule.rollout_malformed(f.bundle):
        return _apply(f, revision, reason)
    first = schedule.seen(f.seen, revision, f.now)
    g = schedule.gate(
        first,
        identity=f.identity,
        spread_s=schedule.spread_of(f.bundle),
        windows=f.windows if f.applied is not None else (),
        now=f.now,
    )
    if not g.wait:
        return _apply(f, revision, reason, g)
    applied = f.applied
    if applied is not None and f.running is not None:  # the LKG is looked after meanwhile
        missing = down_services(applied.services, f.running, applied.jobs)
        if missing and (wait := _restore_backoff(f, applied, missing)) is not None:
            return wait
        if missing:
            return Restore(
                applied,
                missing,
                f"{schedule.describe(g)}; meanwhile {applied.revision} is not fully running "
                f"({', '.join(missing)}): restoring {applied.revision}",
                g,
            )
    return Waiting(revision, g, schedule.describe(g))


def _apply(f: Facts, revision: str, reason: str, g: schedule.Gate | None = None) -> Plan:
    from monky_deployd.core.lifecycle.plans import Apply, Idle

    if f.bundle is None:  # a 304 names the applied revision but carries no bundle to apply
        return Idle(f"{reason}, but tenancy sent no bundle to apply")
    if f.locks:
        reason += f"; update locked ({'; '.join(lk.name for lk in f.locks)}): pull only"
    if g is not None and g.canary:
        reason += " (this box is a canary of the rollout)"
    return Apply(revision, f.bundle, f.applied, reason, f.locks, g)


# -- the cached host facts ---------------------------------------------------------------------


def host_facts_usable(cached: Mapping[str, object] | None, hostname: str) -> bool:
    """Whether cached host facts (hostname, docker and compose versions) can be sent as they are:
    they are of this host. An apply refreshes them anyway (``Commit``)."""
    return cached is not None and cached.get("hostname") == hostname
