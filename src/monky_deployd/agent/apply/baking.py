"""The bake, tick by tick: start it at the commit, observe it while it lasts
(``core.lifecycle.bake``).

``agent.apply.bakestart`` (from ``Commit``) writes ``bake.json``; ``observe`` (from the tick, when
the desired revision is the applied one) inspects the project's containers and carries out the
verdict: still baking (a note), promoted (the record goes: the revision is the last-known-good), or
failed: roll back to the previous last-known-good with the rollback's own box steps, restore its
applied.json, hold the revision (``BAKE_FAILED``, reported like a failed apply). With no
previous last-known-good the record stays, marked failed (never promoted), and the plan
restores the revision with backoff as any drift.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monky_deployd.adapters import deadline
from monky_deployd.agent import context
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline, fault_of
from monky_deployd.core.lifecycle.facts import AppliedFacts
from monky_deployd.core.records.applied import Applied

if TYPE_CHECKING:
    from monky_deployd.core.lifecycle import bake as baked

log = logging.getLogger("monky_deployd")

Phase = Callable[[str], AbstractContextManager[None]]

# the engine's events are read from this long before the first run the bake watches: its
# ``start`` event (before verify and the commit) tells whether they reach back to the run
EVENTS_BEFORE_S = 3600.0


@dataclass(frozen=True)
class Observed:
    note: str = ""  # a line for the tick's message while it bakes, or after a promotion
    error: DeployError | None = None  # the bake failed: the tick reports it and stops


def observe(ctx: context.Context, phase: Phase, applied: AppliedFacts) -> Observed:
    """Judge the applied revision's bake on this tick, if it bakes."""
    record = ctx.state.read_bake()
    if record is None:
        return Observed()
    if record.revision != applied.revision:  # applied.json moved on (or back): stale record
        ctx.state.clear_bake()
        return Observed()
    if record.failed:
        return Observed(f"revision {record.revision} failed its bake and is never promoted")
    # its values first: a healthcheck's output, an error body may echo them (masked everywhere)
    ctx.learn(ctx.secrets_at_rest(record.revision))
    with phase("bake"):
        from monky_deployd.adapters.box.docker import watch  # (not a no-op's)

        observed = tuple(watch.inspect_project(ctx.cfg.docker, record.project))
        now = ctx.clock()
        since = min([record.since, *record.watched.values()]) - EVENTS_BEFORE_S
        events = watch.project_events(ctx.cfg.docker, record.project, since, now)
    from monky_deployd.core.lifecycle import bake as baked

    judged = baked.judge(record, observed, now, events)
    for line in judged.drift:  # outside events: the revision is not at fault (restored)
        log.warning(
            f"revision {record.revision}'s bake: {line}",
            extra={"event": "bake.drift", "revision": record.revision},
        )
    got = judged.verdict
    if isinstance(got, baked.Baking):
        if judged.record != record:
            ctx.state.write_bake(judged.record)
        note = f"baking: {got.left_s:.0f} s left before it is the last-known-good"
        if got.waiting_for:
            note += (
                f" (waiting for {got.waiting_for} to run again: removed or stopped from outside)"
            )
        log.info(f"revision {record.revision} {note}", extra={"event": "bake.waiting"})
        return Observed(note)
    if isinstance(got, baked.Promote):
        ctx.state.clear_bake()
        log.info(
            f"revision {record.revision} stayed up for its bake: it is the last-known-good",
            extra={"event": "bake.promoted", "revision": record.revision},
        )
        if got.drift:
            log.warning(
                f"after the bake: {got.drift} (drift: restored with backoff)",
                extra={"event": "bake.drift", "revision": record.revision},
            )
        return Observed("promoted to last-known-good after its bake")
    return Observed(error=_failed(ctx, phase, record, got))


def _failed(
    ctx: context.Context, phase: Phase, record: baked.Bake, fault: baked.Fault
) -> DeployError:
    after = max(0.0, fault.at - record.since)
    message = (
        f"revision {record.revision} failed its bake: service {fault.service} is "
        f"{fault.state} {after:.0f} s after the commit (verify.bake_s: "
        f"{record.until - record.since:.0f} s; the engine's fact: {fault.fact})"
    )
    hint = (
        f"`docker logs` of {record.project}'s {fault.service} container"
        + (" and its healthcheck" if fault.unhealthy else "")
        + "; the revision ran through verify but did not stay up"
    )
    err = DeployError(message, code=Code.BAKE_FAILED, hint=hint, detail=ctx.masker(fault.detail))
    previous = record.previous
    prev_rev = record.previous_revision
    if previous is None or prev_rev is None or prev_rev == record.revision:
        from monky_deployd.core.lifecycle import bake as baked

        ctx.state.write_bake(baked.Bake(**{**_fields(record), "failed": message}))
        return DeployError(
            f"{message}; there is no earlier last-known-good to roll back to: it is never "
            "promoted and is restored with backoff",
            code=Code.BAKE_FAILED,
            hint=hint,
            detail=err.detail,
        )
    return _roll_back(ctx, phase, record, err, Applied.from_json(json.dumps(previous).encode()))


def _fields(record: baked.Bake) -> dict[str, Any]:
    return {k: getattr(record, k) for k in record.__dataclass_fields__}


def _roll_back(
    ctx: context.Context, phase: Phase, record: baked.Bake, err: DeployError, lkg: Applied
) -> DeployError:
    from monky_deployd.agent.apply import recovery as recover  # as after an apply's rollback
    from monky_deployd.agent.apply import steps
    from monky_deployd.agent.apply.gate import Gated
    from monky_deployd.core.lifecycle import recovery as core_recovery
    from monky_deployd.core.lifecycle.boxsteps import Rollback, Verify
    from monky_deployd.core.records import reasons
    from monky_deployd.core.records.held import RollbackPending
    from monky_deployd.core.wire import report

    rec, state, cfg = ctx.rec, ctx.state, ctx.cfg
    ctx.learn(ctx.secrets_at_rest(lkg.revision))
    recover.fail(rec, err)  # the real fault's line comes before the rollback's
    log.warning(
        f"rolling back to {lkg.revision} (pinned images, no pull)",
        extra={"event": "rollback.start", "revision": record.revision, "to": lkg.revision},
    )
    held = RollbackPending(
        record.revision, Code.BAKE_FAILED.value, err.message, lkg.revision, 1, ctx.clock()
    )
    state.write_held(held)  # before the rollback: the next tick finishes it if this one dies
    state.write_applied(lkg)  # the LKG is what the box is meant to run from now on
    state.clear_bake()
    box_steps = (
        Rollback(record.project, record.revision, lkg.project, lkg.revision),
        Verify(lkg.project, lkg.revision, tuple(lkg.services)),
    )
    try:
        with deadline.tick(cfg.rollback_budget_s, "the rollback's budget"):
            steps.run(ctx, box_steps, phase, gate="rollback")
    except Gated as blocked:  # held.json says: rollback pending; a later tick ends it
        return DeployError(
            f"{err.message}; the rollback to {lkg.revision} is pending: {blocked.message}",
            code=Code.BAKE_FAILED,
            hint=f"{err.hint}; {blocked.hint}",
            detail=err.detail,
        )
    except (DeployError, TickDeadline) as exc:
        rb_err = fault_of(exc)
        rec.rollback = report.RollbackRow(to_revision=lkg.revision, ok=False)
        rec.reasons.append(reasons.Reason(reasons.ROLLBACK, f"to {lkg.revision} (failed)"))
        state.write_held(core_recovery.after_rollback(held, ok=False))
        return DeployError(
            f"{err.message}; the rollback to {lkg.revision} failed too ({rb_err.code}: "
            f"{rb_err.message}); the box is stalled: no tick applies or rolls back on its own",
            code=Code.ROLLBACK_FAILED,
            hint="`docker ps -a` and `docker logs` for the project; publish a fixed "
            "revision, or fix the box and run `monky-deployd apply --once --retry`",
            detail="\n".join(d for d in (err.detail, rb_err.detail) if d),
        )
    rec.applied = lkg.revision  # what runs when the tick ends
    rec.rollback = report.RollbackRow(to_revision=lkg.revision, ok=True)
    rec.reasons.append(reasons.Reason(reasons.ROLLBACK, f"to {lkg.revision}"))
    state.write_held(core_recovery.after_rollback(held, ok=True))
    return DeployError(
        f"{err.message}; rolled back to {lkg.revision} (verified) and holding {record.revision}",
        code=Code.BAKE_FAILED,
        hint=err.hint,
        detail=err.detail,
    )
