"""What a tick does around a failure: roll back or back off, skip a held revision (a hold, a
backoff, a suspend), settle a restore's backoff.

The decisions are ``core.lifecycle.recovery``'s, ``core.lifecycle.decide``'s and
``core.lifecycle.gates``'; this module performs them (the rollback's box steps run through
``agent.apply.steps`` like any other) and logs each with its event, so the journal says why a tick
did not apply and when the next attempt is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from monky_deployd.adapters import deadline
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent import context, logs
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline, fault_of
from monky_deployd.core.lifecycle import recovery
from monky_deployd.core.records import tickrecord as report
from monky_deployd.core.records.tickrecord import TickRecord

if TYPE_CHECKING:
    from monky_deployd.core.lifecycle.boxsteps import Ready
    from monky_deployd.core.lifecycle.plans import Apply, Backoff, Hold, Paused, Restore
    from monky_deployd.core.records.held import Held

log = logging.getLogger("monky_deployd")

Phase = Callable[[str], AbstractContextManager[None]]


def fail(rec: TickRecord, err: DeployError) -> None:
    """Record ``err`` as the tick's fault and log it (the first error line names the fault),
    masked with every secret the tick has learnt so far."""
    masked = logs.masker()
    rec.outcome, rec.code = err.outcome, err.code
    rec.message, rec.detail = masked(err.message), masked(err.detail)
    failed_phase = next((p.name for p in reversed(rec.phases) if not p.ok), "-")
    log.error(
        masked(str(err)),
        extra=logs.fields(
            event="tick.error",
            phase=failed_phase,
            code=err.code,
            hint=masked(err.hint) or None,
            detail=rec.detail or None,
        ),
    )


# -- a skipped tick ---------------------------------------------------------------------------


def skip(rec: TickRecord, plan: Hold | Backoff | Paused) -> None:
    """No apply this tick: say why and when the next attempt is; no report."""
    from monky_deployd.core.lifecycle.plans import Backoff, Paused
    from monky_deployd.core.records import held as held_kinds  # (a failure's record: not a no-op's)

    rec.revision = plan.revision
    rec.message = plan.reason
    if isinstance(plan, Paused):
        rec.outcome, rec.code = "held", Code.SUSPENDED
        until = plan.suspended.until
        log.warning(
            plan.reason,
            extra={
                "event": "plan.suspended",
                "phase": "plan",
                "since": report.rfc3339(plan.suspended.since, "seconds"),
                "until": report.rfc3339(until, "seconds") if until else None,
            },
        )
    elif isinstance(plan, Backoff):
        rec.outcome, rec.code = "held", Code.APPLY_BACKOFF
        next_at = report.rfc3339(plan.next_at, "seconds")
        log.warning(
            plan.reason,
            extra={"event": "plan.backoff", "phase": "plan", "next_attempt_at": next_at},
        )
    elif isinstance(plan.held, held_kinds.Stalled):
        rec.outcome, rec.code = "failed", Code.ROLLBACK_FAILED
        log.error(
            f"{Code.ROLLBACK_FAILED}: {plan.reason}",
            extra=logs.fields(
                event="plan.stalled",
                phase="plan",
                code=Code.ROLLBACK_FAILED,
                hint="`docker ps -a` for the project; publish a fixed revision or run "
                "`monky-deployd apply --once --retry`",
            ),
        )
    else:
        rec.outcome, rec.code = "held", Code.REVISION_HELD
        log.warning(plan.reason, extra={"event": "plan.hold", "phase": "plan"})


# -- after a failed apply -------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    plan: Apply
    ready: Ready | None  # None: the apply failed in its checks
    err: DeployError
    held: Held | None  # the held record before this attempt


def recover(f: Failure, ctx: context.Context, phase: Phase, u: float) -> None:
    """Roll back and hold, or back off (``core.lifecycle.recovery``); always raises the tick's
    fault."""
    from monky_deployd.core.records import held as held_kinds  # (a failure's record: not a no-op's)

    plan, ready, err = f.plan, f.ready, f.err
    rec, state, cfg = ctx.rec, ctx.state, ctx.cfg
    if plan.previous is not None:  # the failure may show the LKG's values (its containers, a
        # volume they wrote): its secrets mask the fault's lines, the rollback's and the report
        ctx.learn(ctx.secrets_at_rest(plan.previous.revision))
    failed_phase = next((p.name for p in reversed(rec.phases) if not p.ok), "-")
    lkg = plan.previous
    step = recovery.after_failure(
        revision=plan.revision,
        code=err.code,
        message=err.message,
        failed_phase=failed_phase,
        lkg=lkg.revision if lkg else None,
        on_failure=ready.on_failure if ready else "rollback",
        previous=f.held,
        now=ctx.clock(),
        base_s=cfg.backoff.base_s,
        cap_s=cfg.backoff.cap_s,
        jitter=cfg.backoff.jitter,
        u=u,
        policy=cfg.policy.digest(),
    )
    if step.rollback_to is None or ready is None or lkg is None:
        state.write_held(step.held)
        if isinstance(step.held, held_kinds.BackingOff):
            when = report.rfc3339(step.held.next_attempt_at, "seconds")
            log.warning(
                f"revision {plan.revision} failed (attempt {step.held.attempts}); "
                f"next attempt at {when} unless the desired revision changes",
                extra={"event": "apply.backoff", "next_attempt_at": when},
            )
        elif isinstance(step.held, held_kinds.Refused):
            log.warning(
                f"revision {plan.revision} is held: judged again when the desired revision or "
                "config.yaml's policy changes, or on `apply --once --retry`",
                extra={"event": "apply.held", "revision": plan.revision},
            )
        raise err
    # recorded before the rollback starts: a tick killed inside it, or a rollback stopped by a
    # lock or a suspend, leaves the failure held with its rollback pending (never re-applied)
    state.write_held(step.held)
    log.warning(
        f"revision {plan.revision} failed in {failed_phase} ({err.code}); "
        f"rolling back to {lkg.revision} (pinned images, no pull)",
        extra={"event": "rollback.start", "revision": plan.revision, "to": lkg.revision},
    )
    fail(rec, err)  # the real fault's line comes before the rollback's
    from monky_deployd.agent.apply import steps  # the box steps: off the no-op tick's imports
    from monky_deployd.agent.apply.gate import Gated
    from monky_deployd.core.lifecycle.boxsteps import rollback_steps

    try:
        # its own deadline, even when the tick's ran out (a slow apply is rolled back, not
        # stalled); tick_deadline_s + this + the report stay inside TimeoutStartSec
        with deadline.tick(
            cfg.rollback_budget_s,
            "the rollback's budget: 2 x "
            "docker.up_timeout_s + verify.deadline_s + poll + one request",
        ):
            steps.run(ctx, rollback_steps(ready, lkg), phase, gate="rollback")
    except Gated as blocked:  # held.json says: rollback pending; the next tick let through ends it
        raise err.restated(
            f"{err.message}; the rollback to {lkg.revision} is pending: {blocked.message}",
            f"{err.hint}; {blocked.hint}" if err.hint else blocked.hint,
        ) from None
    except (DeployError, TickDeadline) as exc:
        rb_err = fault_of(exc)
        from monky_deployd.core.wire.report import RollbackRow  # (not a no-op's)

        rec.rollback = RollbackRow(to_revision=lkg.revision, ok=False)
        from monky_deployd.core.records import reasons  # off the no-op tick's imports

        rec.reasons.append(reasons.Reason(reasons.ROLLBACK, f"to {lkg.revision} (failed)"))
        state.write_held(recovery.after_rollback(step.held, ok=False))
        raise DeployError(
            f"revision {plan.revision} failed ({err.code}: {err.message}) and the rollback "
            f"to {lkg.revision} failed too ({rb_err.code}: {rb_err.message}); the box is "
            "stalled: no tick applies or rolls back on its own",
            code=Code.ROLLBACK_FAILED,
            hint="`docker ps -a` and `docker logs` for the project; publish a fixed "
            "revision, or fix the box and run `monky-deployd apply --once --retry`",
            detail="\n".join(d for d in (err.detail, rb_err.detail) if d),
        ) from rb_err
    from monky_deployd.core.wire.report import RollbackRow  # (not a no-op's)

    rec.rollback = RollbackRow(to_revision=lkg.revision, ok=True)
    from monky_deployd.core.records import reasons  # off the no-op tick's imports

    rec.reasons.append(reasons.Reason(reasons.ROLLBACK, f"to {lkg.revision}"))
    state.write_held(recovery.after_rollback(step.held, ok=True))
    raise err.restated(
        f"{err.message}; rolled back to {lkg.revision} (verified) and holding {plan.revision}"
    )


def gated(rec: TickRecord, blocked: DeployError) -> None:
    """A lock or a suspend stopped a box step since the plan: the tick is held, as a plan-time
    lock or suspend holds it (no report; tried again next tick)."""
    rec.outcome, rec.code, rec.message = "held", blocked.code, blocked.message


def pending_rollback_done(ctx: context.Context, plan: Restore, held: Held | None) -> Held | None:
    """A pending rollback (``core.lifecycle.recovery.rollback_pending``) ran and the LKG is
    verified: the failed revision is held, rolled back, as if the rollback had finished on its own
    tick."""
    lkg = plan.applied.revision
    from monky_deployd.core.wire.report import RollbackRow  # (not a no-op's)

    ctx.rec.rollback = RollbackRow(to_revision=lkg, ok=True)
    from monky_deployd.core.records import reasons  # off the no-op tick's imports

    ctx.rec.reasons.append(reasons.Reason(reasons.ROLLBACK, f"to {lkg}"))
    ctx.rec.outcome = "applied"
    ctx.rec.message = (
        f"finished the pending rollback of {plan.rollback_of} to {lkg} (pinned, no pull, "
        f"verified); {plan.rollback_of} stays held"
    )
    if held is None:
        return None
    after = recovery.after_rollback(held, ok=True)
    ctx.state.write_held(after)
    log.info(ctx.rec.message, extra={"event": "rollback.finished", "to": lkg})
    return after


def pending_rollback_failed(
    ctx: context.Context, plan: Restore, err: DeployError, held: Held | None
) -> None:
    """A pending rollback ran and failed: stalled (ROLLBACK_FAILED), as a rollback failing on
    its own tick; raises the tick's fault."""
    lkg = plan.applied.revision
    from monky_deployd.core.wire.report import RollbackRow  # (not a no-op's)

    ctx.rec.rollback = RollbackRow(to_revision=lkg, ok=False)
    if held is not None:
        ctx.state.write_held(recovery.after_rollback(held, ok=False))
    raise DeployError(
        f"the pending rollback of {plan.rollback_of} to {lkg} failed ({err.code}: "
        f"{err.message}); the box is stalled: no tick applies or rolls back on its own",
        code=Code.ROLLBACK_FAILED,
        hint="`docker ps -a` and `docker logs` for the project; publish a fixed "
        "revision, or fix the box and run `monky-deployd apply --once --retry`",
        detail=err.detail,
    ) from err


# -- after a restore ------------------------------------------------------------------------------


def restore_failed(
    ctx: context.Context, plan: Restore, err: DeployError, held: Held | None, u: float
) -> None:
    """A restore (``up`` + verify of the applied revision) failed: no rollback (it is the
    last-known-good), the next restore backs off (``core.lifecycle.recovery``); raises the tick's
    fault, naming the revision and the service."""
    from monky_deployd.core.records import held as held_kinds  # (a failure's record: not a no-op's)

    cfg = ctx.cfg.backoff
    after = recovery.after_restore_failure(
        held,
        applied=plan.applied.revision,
        code=err.code,
        message=err.message,
        now=ctx.clock(),
        base_s=cfg.base_s,
        cap_s=cfg.cap_s,
        jitter=cfg.jitter,
        u=u,
    )
    ctx.state.write_held(after)
    wait = held_kinds.restore_wait(after)
    when = report.rfc3339(wait.next_at, "seconds") if wait is not None else "-"
    raise err.restated(
        f"restoring revision {plan.applied.revision} failed: {err.message}; "
        f"next restore attempt at {when} (attempt {wait.attempts if wait else 1})"
    ) from err


def restore_settled(state: StateDir, held: Held | None, applied: str) -> Held | None:
    """The applied revision runs (restored and verified, or found running): forget a restore's
    backoff. Returns the record that stays."""
    after = recovery.after_restore(held, applied)
    if after == held:
        return held
    if after is None:
        state.clear_held()
    else:
        state.write_held(after)
    log.info(
        f"revision {applied} runs again: the restore backoff is over",
        extra={"event": "restore.settled", "phase": "plan"},
    )
    return after
