"""One tick: observe, decide, act, publish; each phase timed and logged.

    transport -> token -> checkin -> [inspect]                          observe
    (agent.observe.observe)
    -> plan                                                              decide
    (core.lifecycle.decide)
      apply:   bundle -> secrets -> render -> registry -> preflight      act: the checks
               (agent.apply.prepare; nothing changes) -> stage -> pull -> [down] -> up -> verify
               -> commit (core.lifecycle.boxsteps, agent.apply.steps)
               on failure: [rollback -> verify] (core.lifecycle.recovery), then hold or back off
      restore: up -> verify                  (a failure backs off: no rollback, it is the LKG)
      hold / backoff / suspended / idle / noop: nothing
      waiting: nothing (outside every update window, or before the box's rollout place;
               ``agent.observe.pace`` keeps waiting.json and says when it applies)
    -> report, ledger, metrics, summary line                            publish (agent.tick.publish)

``core.lifecycle.decide.decide`` turns the observation (check-in answer, applied record, held
record, containers, locks, suspend, a killed tick's journal, the clock, a new revision's first
sight and the update windows) into ``Idle | Noop | Restore | Apply | Hold | Backoff | Paused |
Waiting``. Any ``DeployError`` ends the tick: it is logged once as the first error line (code, the
real fault, what to check), reported to tenancy when a revision was being applied, and turned into
the exit code by ``cli``.

The tick has one overall deadline (``tick_deadline_s``, ``adapters.deadline``): every request
and child gets at most the time left, and past it ``core.faults.TickDeadline`` (a
``BaseException``: nothing on the way swallows it) ends the tick with ``TICK_DEADLINE``; a
failed apply is still rolled back on its own budget and the report still goes out, within its
own request deadline.
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import httpx

from monky_deployd.adapters import deadline
from monky_deployd.adapters.box.state import leftovers
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net import transport
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.agent import context, logs, outage
from monky_deployd.agent.apply import recovery
from monky_deployd.agent.context import Options
from monky_deployd.agent.observe import checkin, observe, pace
from monky_deployd.agent.tick import publish
from monky_deployd.agent.token import TokenKeeper
from monky_deployd.config import Config
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline, fault_of
from monky_deployd.core.lifecycle.decide import Noop, decide
from monky_deployd.core.records.tickrecord import PhaseTiming, TickRecord
from monky_deployd.core.render import mask

log = logging.getLogger("monky_deployd")

Clock = Callable[[], float]


def run_tick(
    cfg: Config,
    *,
    clock: Clock = time.time,
    config_ms: int = 0,
    wire: httpx.BaseTransport | None = None,
    options: Options = Options(),  # noqa: B008 (frozen)
) -> TickRecord:
    """Run one tick and return its record; never raises a ``DeployError``. ``clock`` and
    ``wire`` (``transport.open_client``'s) are for tests: the fakes' clock, an in-process wire."""
    rec = TickRecord(tick_id=uuid.uuid4().hex[:16], started_at=clock())
    logs.set_tick(rec.tick_id)
    logs.set_masker(mask.NO_SECRETS)
    rec.phases.append(PhaseTiming("config", True, config_ms))
    t0 = time.monotonic()
    out = publish.Publisher(cfg)
    with ExitStack() as held_open:  # the transport stays open until the report is out
        try:
            with deadline.tick(cfg.tick_deadline_s):
                state = StateDir(cfg.state_dir).ensure()
                with state.lock(cfg.lock_wait_s):
                    if swept := leftovers.sweep(state):
                        log.warning(
                            f"removed {len(swept)} half-written leftover(s) of a killed tick",
                            extra={"event": "state.swept", "paths": swept},
                        )
                    _Tick(cfg, state, rec, clock, wire, options, out, held_open).run()
        except (DeployError, TickDeadline) as exc:
            from monky_deployd.adapters.box.state import owner  # names a poisoned state dir

            recovery.fail(rec, owner.explain(cfg.state_dir, fault_of(exc), cfg.service_user))
        except Exception as exc:  # a bug: still one named first line and an exit code, not a crash
            log.debug("unexpected exception", exc_info=True, extra={"event": "tick.bug"})
            recovery.fail(
                rec,
                DeployError(
                    f"unexpected {type(exc).__name__}: {exc}",
                    code=Code.INTERNAL,
                    hint="this is a monky-deployd bug: run with --debug and report the traceback",
                ),
            )
        rec.finished_at = clock()
        out.publish(rec, int((time.monotonic() - t0) * 1000))
    return rec


class _Tick:
    def __init__(
        self,
        cfg: Config,
        state: StateDir,
        rec: TickRecord,
        clock: Clock,
        wire: httpx.BaseTransport | None,
        options: Options,
        out: publish.Publisher,
        held_open: ExitStack,
    ) -> None:
        self.cfg, self.state, self.rec, self.clock, self.wire = cfg, state, rec, clock, wire
        self.options, self.out, self.held_open = options, out, held_open
        self.ctx = context.Context(
            cfg, state, rec, clock, watch_clock=options.watch_clock, sleep=options.sleep
        )

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        deadline.check_tick(f"before the {name} phase")
        started = time.monotonic()
        ok = False
        with logs.phase(name):
            try:
                yield
                ok = True
            finally:
                ms = int((time.monotonic() - started) * 1000)
                self.rec.phases.append(PhaseTiming(name, ok, ms))
                log.info(
                    f"{name} {'done' if ok else 'failed'} in {ms} ms",
                    extra={"event": "phase.end", "ok": ok, "ms": ms},
                )

    def run(self) -> None:
        with self.phase("transport"):
            client = self.held_open.enter_context(transport.open_client(self.cfg, self.wire))
        cfg = self.cfg
        tenancy = Tenancy(client, cfg.tenancy, cfg.env, max_body_bytes=cfg.max_bundle_bytes)
        bao = Bao(client, cfg.openbao)
        # -- observe -------------------------------------------------------------------------
        self.ctx.learn(
            checkin.tokens_at_rest(self.cfg, self.state)
        )  # before any request or child: the log filter too
        with self.phase("token"):
            keeper = TokenKeeper(cfg, bao, tenancy, self.clock, state=self.state)
            token = outage.acquire(keeper, tenancy)  # OpenBao down: tenancy too?
        self.ctx.learn((*checkin.tokens_at_rest(self.cfg, self.state), token.token))
        local = observe.read_local(self.state)
        self.rec.applied = local.record.revision if local.record else None
        with self.phase("checkin"):
            answer, token = checkin.checkin(self.ctx, tenancy, keeper, token, local)
        channel = publish.Channel(self.state, tenancy, token.token)
        self.out.channel = channel
        publish.deliver_outbox(self.state, tenancy, token.token)
        with (
            self.phase("inspect")
            if observe.asks_engine(cfg, answer, local, local.held)
            else observe.nothing()
        ):
            obs = observe.observe(cfg, self.state, answer, local, self.clock())
        self.rec.desired = obs.desired
        observe.settle(self.state, obs)
        bake_note = ""
        if observe.bakes(obs) and local.applied is not None:  # the committed revision proves itself
            from monky_deployd.agent.apply import (
                baking,  # (reads bake.json; inspects while it bakes)
            )

            baked = baking.observe(self.ctx, self.phase, local.applied)
            if baked.error is not None:  # rolled back and held (or never promoted): reported
                self.rec.reportable = True
                self.rec.revision = local.applied.revision
                recovery.fail(self.rec, baked.error)
                self.state.clear_journal()
                return
            bake_note = baked.note
        # -- decide --------------------------------------------------------------------------
        plan = decide(obs.facts(self.options.retry))
        pace.keep(self.state, local.waiting, local.stored_waiting, plan)
        held = obs.held
        steady = isinstance(plan, Noop)
        if not steady:  # the kinds a no-op never meets (core.lifecycle.plans): off its imports
            from monky_deployd.core.lifecycle import plans
        lkg_runs = steady or isinstance(plan, plans.Hold)
        if lkg_runs and local.applied is not None:
            held = recovery.restore_settled(self.state, held, local.applied.revision)
            cut, record = obs.interrupted, local.record
            if record is not None and cut is not None and cut.phase == "commit":
                from monky_deployd.agent.apply import steps  # (rare: a GC a kill cut short)

                steps.resume_collect(self.ctx, record, cut)
        if obs.interrupted is not None and (steady or not isinstance(plan, plans.Paused)):
            self.state.clear_journal()  # the plan accounts for it; its own steps journal anew
        if isinstance(plan, Noop):
            pass  # the steady tick: on to its line below
        elif isinstance(plan, plans.Hold | plans.Backoff | plans.Paused):
            recovery.skip(self.rec, plan)
            return
        elif isinstance(plan, plans.Waiting):
            pace.wait(self.rec, plan)
            return
        log.info(plan.reason, extra={"event": f"plan.{plan.kind}", "phase": "plan"})
        if isinstance(plan, Noop) or isinstance(plan, plans.Idle):  # noqa: SIM101
            self.rec.outcome, self.rec.message = plan.kind, plan.reason
            if isinstance(plan, Noop):
                self.rec.revision = plan.applied.revision
                self.rec.message += f"; {bake_note}" if bake_note else ""
            return
        # -- act -----------------------------------------------------------------------------
        gc.enable()  # (``cli.run`` turns the collector off for a no-op; an apply's data is large)
        from monky_deployd.agent.apply import act  # the apply path's modules, in one import

        self.rec.reportable = True
        doer = act.Act(self.ctx, self.phase, bao, token.token, obs, held, self.options)
        try:
            if isinstance(plan, plans.Restore | plans.Stop):
                self.rec.revision = plan.applied.revision
                doer.restore(plan) if isinstance(plan, plans.Restore) else doer.stop(plan)
            else:
                self.rec.revision = plan.revision
                doer.apply(plan)
        except act.Skipped:
            self.rec.reportable = False
            self.state.clear_journal()
            return  # an update lock: pulled, nothing recreated, no report (tried next tick)
        except (DeployError, TickDeadline) as exc:
            recovery.fail(self.rec, fault_of(exc))
        self.state.clear_journal()  # the apply or restore ended (a killed tick leaves it)
