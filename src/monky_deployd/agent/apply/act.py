"""Act: the box steps of a decision to restore or apply, and recovery when they fail.

Imported by the tick only when there is something to restore or apply: this one import loads
the apply path (the checks, the reasons, the box steps' adapters), the no-op tick none of it.

    restore   preflight (project ownership) -> up -> verify; a failure backs off the next
              restore (no rollback: it is the last-known-good)
    apply     the checks (``agent.apply.prepare``: nothing changes) -> stage -> pull -> [down] -> up
              -> verify -> commit; a failure rolls back and holds, or backs off
              (``agent.apply.recovery``); update locks: pulled, not applied (``Skipped``)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from monky_deployd.agent import context
from monky_deployd.agent.apply import prepare, reasons, recovery, steps
from monky_deployd.agent.apply.gate import Gated
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline, fault_of
from monky_deployd.core.lifecycle import gates
from monky_deployd.core.lifecycle.boxsteps import Down, Ready, apply_steps, restore_steps
from monky_deployd.core.lifecycle.plans import Apply, Restore, Stop

if TYPE_CHECKING:
    from monky_deployd.adapters.net.bao import Bao
    from monky_deployd.agent.context import Options
    from monky_deployd.agent.observe.observe import Observation
    from monky_deployd.core.records.held import Held

log = logging.getLogger("monky_deployd")

Phase = Callable[[str], AbstractContextManager[None]]


class Skipped(Exception):
    """An apply stopped on purpose (an update lock): no report, the record says why."""


class Act:
    """Restore or apply: the box steps of the decision, and recovery when they fail."""

    def __init__(
        self,
        ctx: context.Context,
        phase: Phase,
        bao: Bao,
        token: str,
        obs: Observation,
        held: Held | None,
        options: Options,
    ) -> None:
        self.ctx, self.rec, self.phase, self.bao, self.token = ctx, ctx.rec, phase, bao, token
        self.obs, self.held, self.options = obs, held, options

    def stop(self, plan: Stop) -> None:
        """A held host path moved (``core.lifecycle.decide``): the services still running that
        mount it stopped (``docker compose stop``), then POLICY_PATH_MOVED, reported."""
        applied = plan.applied
        if plan.stop:
            with self.phase("stop"):
                compose = self.ctx.compose(applied.project, applied.revision, judged=False)
                compose.stop(plan.stop)
        done = f"stopped {', '.join(plan.stop)}" if plan.stop else "already stopped"
        raise DeployError(
            f"revision {applied.revision}: a host path that {', '.join(plan.services)} mounts "
            f"no longer leads where it did at its up, so it is kept stopped ({done}): "
            f"{plan.moved[0][1]}",
            code=Code.POLICY_PATH_MOVED,
            hint="what changed on the path's way (a link, a directory renamed, a container with "
            "a writable mount above it); put it back, or publish a new revision (judged anew)",
            detail="\n".join(f"{s or 'volume'}: {why}" for s, why in plan.moved),
        )

    def restore(self, plan: Restore) -> None:
        with self.phase("preflight"):
            prepare.check_owned(self.ctx, plan.applied.project)
        pinned = self.ctx.state.has_pins(plan.applied.revision)
        reasons.note(self.rec, reasons.for_restore(plan, self.obs.running, self.obs.interrupted))
        try:
            steps.run(
                self.ctx,
                self._failed_projects_down(plan)
                + restore_steps(plan, pinned, only_missing=self.obs.interrupted is None),
                self.phase,
                gate="rollback" if plan.rollback_of is not None or plan.foreign else "restore",
            )
        except Gated as blocked:  # a lock or a suspend since the plan: nothing was changed
            recovery.gated(self.rec, blocked)
            raise Skipped from None
        except (DeployError, TickDeadline) as exc:  # no rollback (it is the LKG): the next
            # restore backs off; a pending rollback that fails stalls, as on its own tick
            if plan.rollback_of is not None and isinstance(exc, DeployError):
                recovery.pending_rollback_failed(self.ctx, plan, exc, self.held)
            recovery.restore_failed(self.ctx, plan, fault_of(exc), self.held, self.options.rand())
        if plan.rollback_of is not None:
            recovery.pending_rollback_done(self.ctx, plan, self.held)
            return
        recovery.restore_settled(self.ctx.state, self.held, plan.applied.revision)
        self.rec.outcome = "applied"
        self.rec.message = (
            f"restored {', '.join(plan.missing)} of revision {plan.applied.revision} "
            "(no pull, verified)"
        )

    def _failed_projects_down(self, plan: Restore) -> tuple[Down, ...]:
        """A pending rollback whose failed revision runs under another compose project (a
        project rename): that project's ``down`` first, found by the engine's labels (the
        failed revision's containers), only a project this agent started (projects.json)."""
        failed = plan.rollback_of
        if failed is None:
            return ()
        from monky_deployd.adapters.box.docker import docker_api

        owned = self.ctx.state.read_projects()
        found = docker_api.revision_projects(self.ctx.cfg.docker, failed)
        others = sorted(p for p in found if p != plan.applied.project and p in owned)
        for project in others:
            log.warning(
                f"revision {failed}'s containers run under project {project}, not "
                f"{plan.applied.project}: taking {project} down before the rollback",
                extra={"event": "rollback.down", "project": project, "revision": failed},
            )
        return tuple(Down(project, failed) for project in others)

    def apply(self, plan: Apply) -> None:
        """Every check first (nothing on the box changes), then the box steps; a failure rolls
        back to the last-known-good release or backs off (``core.lifecycle.recovery``)."""
        ready: Ready | None = None
        forced = self.options.retry
        state = self.ctx.state
        reasons.note(self.rec, reasons.for_apply(plan, self.held, forced), quiet=True)
        if plan.previous is not None:  # the LKG's secrets too, before stage rewrites the config
            self.ctx.learn(self.ctx.secrets_at_rest(plan.previous.revision))
        checked = prepare.Checked()
        try:
            ready = prepare.check(self.ctx, self.bao, self.token, plan, self.phase, checked)
            ready = reasons.checked(
                state, self.rec, plan, ready, checked.secrets, self.held, forced
            )
            state.own_project(ready.project)  # before anything of it is created
            steps.run(self.ctx, apply_steps(plan, ready), self.phase, gate="apply")
        except Gated as blocked:  # a lock or a suspend since the plan: nothing was changed
            recovery.gated(self.rec, blocked)
            raise Skipped from None
        except (DeployError, TickDeadline) as exc:
            recovery.recover(
                recovery.Failure(plan, ready, fault_of(exc), self.held),
                self.ctx,
                self.phase,
                self.options.rand(),
            )
        if plan.locks:
            now = self.ctx.clock()
            self.rec.outcome, self.rec.code = "held", Code.UPDATE_LOCKED
            self.rec.message = (
                f"revision {plan.revision} is pulled but not applied: update locked by "
                + gates.summary(plan.locks, now)
                + "; trying again next tick"
            )
            log.warning(self.rec.message, extra={"event": "apply.locked", "phase": "plan"})
            raise Skipped
        from monky_deployd.agent.apply import trust  # committed: the release floor rises

        trust.record(state, plan.revision, checked.trust)
        running = sum(1 for s in self.rec.services if s["state"] == "running")
        self.rec.outcome, self.rec.applied = "applied", plan.revision
        self.rec.message = f"applied {plan.revision}: {running} services running (verified)"
