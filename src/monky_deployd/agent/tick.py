"""One tick: the phases in order, each timed and logged.

    transport -> token -> checkin -> [inspect] -> plan
      apply:   bundle -> secrets -> render -> registry -> preflight      (checks: nothing changes)
               -> stage -> pull -> [down] -> up -> verify -> commit        (the box steps)
               on failure: [rollback -> verify] (core.recovery), then hold or back off
      restore: up -> verify                  (a failure backs off: no rollback, it is the LKG)
      hold / backoff: nothing (the desired revision failed here before)
    -> report

``core.plan.decide`` turns the facts (check-in answer, applied record, held record,
containers, the clock) into ``Idle | Noop | Restore | Apply | Hold | Backoff | Paused``; an apply's
checks are ``core.prepare``'s pure functions around
two reads (OpenBao, ``docker info``); ``core.boxsteps`` then lists the box steps and
``agent.steps`` performs them, each inside its phase. Any ``DeployError`` ends the tick: it is
logged once as the first error line (code, the real fault, what to check), reported to tenancy
when a revision was being applied, and turned into the exit code by ``cli``.

The tick has one overall deadline (``tick_deadline_s``, ``adapters.deadline``): every request
and child gets at most the time left, and past it the tick ends with ``TICK_DEADLINE`` at the
next phase boundary (the report still goes out, within its own request deadline).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from monky_deployd.adapters import deadline
from monky_deployd.adapters.box import docker_api, leftovers
from monky_deployd.adapters.box.grant import read_grant
from monky_deployd.adapters.box.state import StateDir
from monky_deployd.adapters.net import transport
from monky_deployd.adapters.net.bao import Bao, KvPages
from monky_deployd.adapters.net.tenancy import Checkin, Tenancy
from monky_deployd.agent import logs, recover, steps, window
from monky_deployd.agent.token import HeldToken, TokenKeeper
from monky_deployd.config import Config
from monky_deployd.core import gates, mask, recovery, report, wire
from monky_deployd.core.boxsteps import Ready, apply_steps, restore_steps
from monky_deployd.core.errors import BaoError, Code, DeployError, TokenError
from monky_deployd.core.plan import (
    AppliedFacts,
    Apply,
    Backoff,
    Facts,
    Hold,
    Idle,
    Noop,
    Paused,
    Restore,
    decide,
    needs_container_check,
)
from monky_deployd.core.records import Held, Journal
from monky_deployd.core.report import PhaseTiming, TickRecord
from monky_deployd.core.services import Service

if TYPE_CHECKING:  # an apply's checks and box adapters load when an apply runs (issue 15)
    from monky_deployd.core import prepare
    from monky_deployd.core.bundle import Bundle, ManifestEntry

log = logging.getLogger("monky_deployd")

Clock = Callable[[], float]


@dataclass(frozen=True)
class Options:
    """How this tick runs beyond the config: the operator's ``--retry``; for tests, the verify
    phase's clock and sleep and the backoff's random source."""

    retry: bool = False
    watch_clock: Clock = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random


def run_tick(
    cfg: Config,
    *,
    clock: Clock = time.time,
    config_ms: int = 0,
    wire: httpx.BaseTransport | None = None,
    options: Options = Options(),
) -> TickRecord:
    """Run one tick and return its record; never raises a ``DeployError``. ``clock`` and
    ``wire`` (``transport.open_client``'s) are for tests: the fakes' clock, an in-process wire."""
    rec = TickRecord(tick_id=uuid.uuid4().hex[:16], started_at=clock())
    logs.set_tick(rec.tick_id)
    logs.set_masker(mask.NO_SECRETS)
    rec.phases.append(PhaseTiming("config", True, config_ms))
    t0 = time.monotonic()
    try:
        with deadline.tick(cfg.tick_deadline_s):
            state = StateDir(cfg.state_dir).ensure()
            with state.lock(cfg.lock_wait_s):
                if swept := leftovers.sweep(state):
                    log.warning(
                        f"removed {len(swept)} half-written leftover(s) of a killed tick",
                        extra={"event": "state.swept", "paths": swept},
                    )
                _Tick(cfg, state, rec, clock, wire, options).run()
    except DeployError as err:
        _fail(rec, err)
    except Exception as exc:  # a bug: still one named first line and an exit code, not a crash
        log.debug("unexpected exception", exc_info=True, extra={"event": "tick.bug"})
        _fail(
            rec,
            DeployError(
                f"unexpected {type(exc).__name__}: {exc}",
                code=Code.INTERNAL,
                hint="this is a monky-deployd bug: run with --debug and report the traceback",
            ),
        )
    rec.finished_at = clock()
    window.record(cfg, rec, int((time.monotonic() - t0) * 1000))  # ledger + metrics textfile
    level = {"applied": logging.INFO, "noop": logging.INFO, "idle": logging.INFO}.get(
        rec.outcome, logging.WARNING if rec.outcome == "held" else logging.ERROR
    )
    log.log(
        level,
        f"tick {rec.outcome}: {rec.message}",
        extra={
            "event": "tick.summary",
            "phase": "summary",
            "outcome": rec.outcome,
            "code": rec.code,
            "revision": rec.revision,
            "duration_ms": int((time.monotonic() - t0) * 1000),
        },
    )
    return rec


_fail = recover.fail


class _Skipped(Exception):
    """An apply stopped on purpose (an update lock): no report, the record says why."""


class _Tick:
    def __init__(
        self,
        cfg: Config,
        state: StateDir,
        rec: TickRecord,
        clock: Clock,
        wire: httpx.BaseTransport | None = None,
        options: Options = Options(),
    ) -> None:
        self.cfg, self.state, self.rec, self.clock, self.wire = cfg, state, rec, clock, wire
        self.options = options
        self.ctx = steps.Context(
            cfg, state, rec, clock, watch_clock=options.watch_clock, sleep=options.sleep
        )
        self.held: Held | None = None
        self.tenancy: Tenancy | None = None
        self.keeper: TokenKeeper | None = None
        self.token: HeldToken | None = None
        self.bao: Bao | None = None
        self.running: tuple[Service, ...] | None = None  # the applied project's containers
        self.interrupted: Journal | None = None
        self.secrets: dict[str, object] = {}  # manifest name -> KV value (for the fingerprint)

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
            client = transport.open_client(self.cfg, self.wire)
        try:
            self._run_with_client(client)
        finally:
            client.close()

    def _run_with_client(self, client: httpx.Client) -> None:
        cfg = self.cfg
        self.tenancy = Tenancy(client, cfg.tenancy, cfg.env, max_body_bytes=cfg.max_bundle_bytes)
        self.bao = Bao(client, cfg.openbao)
        self.ctx.learn(self._tokens_at_rest())  # before any request or child: the log filter too
        with self.phase("token"):
            self.keeper = TokenKeeper(cfg, self.bao, self.tenancy, self.clock, state=self.state)
            self.token = self.keeper.acquire()
        self.ctx.learn((*self._tokens_at_rest(), self.token.token))

        record = self.state.read_applied()
        self.held = self.state.read_held()
        applied = (
            AppliedFacts(record.revision, record.project, tuple(record.services))
            if record
            else None
        )
        with self.phase("checkin"):
            answer = self._checkin(applied)
        assert self.token is not None
        recover.deliver_outbox(self.state, self.tenancy, self.token.token)

        desired = answer.revision if answer.status == 200 else None
        running: tuple[Service, ...] | None = None
        held_rev = self.held.revision if self.held else None
        if applied and needs_container_check(answer.status, desired, applied.revision, held_rev):
            with self.phase("inspect"):
                running = tuple(docker_api.project_containers(self.cfg.docker, applied.project))
        self.held = recover.forget_preempted(self.state, self.held, answer.status, desired, applied)
        now = self.clock()
        interrupted = self.state.read_journal()
        self.running, self.interrupted = running, interrupted
        if interrupted is not None:
            log.warning(
                f"the tick {interrupted.tick_id} was killed during {interrupted.phase} of "
                f"revision {interrupted.revision}; this tick resumes or restores",
                extra={"event": "journal.interrupted", "phase": "plan"},
            )
        plan = decide(
            Facts(
                answer.status,
                desired,
                applied,
                running,
                answer.bundle,
                self.held,
                now,
                self.options.retry,
                recover.valid_locks(self.cfg, now),
                recover.active_suspend(self.state, now),
                interrupted,
            )
        )
        if isinstance(plan, Noop | Hold) and applied is not None:  # the LKG runs
            self.held = recover.restore_settled(self.state, self.held, applied.revision)
        if interrupted is not None and not isinstance(plan, Paused):
            self.state.clear_journal()  # the plan accounts for it; its own steps journal anew
        if isinstance(plan, Hold | Backoff | Paused):
            recover.skip(self.rec, plan)
            return
        log.info(plan.reason, extra={"event": f"plan.{plan.kind}", "phase": "plan"})
        if isinstance(plan, Idle | Noop):
            self.rec.outcome, self.rec.message = plan.kind, plan.reason
            if isinstance(plan, Noop):
                self.rec.revision = plan.applied.revision
            return
        try:
            if isinstance(plan, Restore):
                self.rec.revision = plan.applied.revision
                self._restore(plan)
            else:
                self.rec.revision = plan.revision
                self._apply(plan)
        except _Skipped:
            self.state.clear_journal()
            return  # an update lock: pulled, nothing recreated, no report (tried next tick)
        except DeployError as err:
            _fail(self.rec, err)
        self.state.clear_journal()  # the apply or restore ended (a killed tick leaves it)
        self._report()

    def _tokens_at_rest(self) -> tuple[str, ...]:
        """The grant and the stored token, when readable (the token phase names any fault)."""
        found: list[str] = []
        with suppress(DeployError):
            found.append(read_grant(self.cfg.grant_file))
        try:
            stored = self.state.read_token()
        except (DeployError, ValueError):
            stored = None
        if stored is not None and stored.token is not None:
            found.append(stored.token.token)
        return tuple(found)

    # -- check-in ----------------------------------------------------------------------------

    def _checkin(self, applied: AppliedFacts | None) -> Checkin:
        assert self.tenancy and self.keeper and self.token
        body = wire.CheckinRequest.of(
            steps.host_facts(self.ctx),
            applied.revision if applied else None,
            recovery.checkin_outcome(self.held),
        )
        etag = applied.revision if applied else None
        try:
            return self.tenancy.checkin(self.token.token, body, etag)
        except TokenError as err:
            if err.code is not Code.TOKEN_INVALID:
                raise
            log.warning(
                "tenancy rejected the held token; obtaining a new one once",
                extra={"event": "token.rejected", "kind": self.token.kind},
            )
            self.token = self.keeper.invalidate(self.token)
            self.ctx.learn((self.token.token,))
            return self.tenancy.checkin(self.token.token, body, etag)

    # -- restore and apply -------------------------------------------------------------------

    def _check_owned(self, project: str) -> None:
        """PROJECT_NOT_OWNED unless every container of ``project`` came from our revisions/
        (with no container: unless its volumes/networks are of a project we started)."""
        from monky_deployd.core import prepare

        dirs = docker_api.project_working_dirs(self.cfg.docker, project)
        left = [] if dirs else docker_api.project_leftovers(self.cfg.docker, project)
        known = bool(left) and project in self.state.read_projects()
        prepare.check_owned(project, dirs, str(self.state.revisions_dir.absolute()), left, known)

    def _restore(self, plan: Restore) -> None:
        with self.phase("preflight"):
            self._check_owned(plan.applied.project)
        pinned = self.state.has_pins(plan.applied.revision)
        from monky_deployd.agent import explain  # off the no-op tick's imports

        explain.note(self.rec, explain.for_restore(plan, self.running, self.interrupted))
        try:
            steps.run(self.ctx, restore_steps(plan, pinned), self.phase)
        except DeployError as err:  # no rollback (it is the LKG): failed, the next backs off
            recover.restore_failed(self.ctx, plan, err, self.held, self.options.rand())
        self.held = recover.restore_settled(self.state, self.held, plan.applied.revision)
        self.rec.outcome = "applied"
        self.rec.message = (
            f"restored {', '.join(plan.missing)} of revision {plan.applied.revision} "
            "(no pull, verified)"
        )

    def _apply(self, plan: Apply) -> None:
        """Every check first (nothing on the box changes), then the box steps; a failure rolls
        back to the last-known-good release or backs off (``core.recovery``)."""
        ready: Ready | None = None
        forced = self.options.retry
        from monky_deployd.agent import explain  # off the no-op tick's imports

        explain.note(self.rec, explain.for_apply(plan, self.held, forced), quiet=True)
        if plan.previous is not None:  # the LKG's secrets too, before stage rewrites the config
            self.ctx.learn(self.ctx.secrets_at_rest(plan.previous.revision))
        try:
            ready = self._check(plan)
            ready = explain.checked(
                self.state, self.rec, plan, ready, self.secrets, self.held, forced
            )
            self.state.own_project(ready.project)  # before anything of it is created
            steps.run(self.ctx, apply_steps(plan, ready), self.phase)
        except DeployError as err:
            recover.recover(
                recover.Failure(plan, ready, err, self.held),
                self.ctx,
                self.phase,
                self.options.rand(),
            )
        if plan.locks:
            self.rec.outcome, self.rec.code = "held", Code.UPDATE_LOCKED
            self.rec.message = (
                f"revision {plan.revision} is pulled but not applied: update locked by "
                + gates.summary(plan.locks, self.clock())
                + "; trying again next tick"
            )
            log.warning(self.rec.message, extra={"event": "apply.locked", "phase": "plan"})
            raise _Skipped
        running = sum(1 for s in self.rec.services if s["state"] == "running")
        self.rec.outcome = "applied"
        self.rec.message = f"applied {plan.revision}: {running} services running (verified)"

    def _check(self, plan: Apply) -> Ready:
        """Every check of an apply, each in its phase: nothing on the box changes."""
        from monky_deployd.adapters.box import preflight
        from monky_deployd.adapters.box.compose import docker_env
        from monky_deployd.core import prepare

        with self.phase("bundle"):
            bundle = prepare.check_bundle(plan.revision, plan.bundle)
        with self.phase("secrets"):
            reads = self._read_secrets(bundle)
            self.ctx.learn(mask.strings_in(list(reads.found.values())))
            self.secrets = {e.name: v for e, v in reads.found.items()}
            env = prepare.env_values(bundle, reads)
        with self.phase("render"):
            env_text = prepare.render_env(bundle.env_template, env)
        with self.phase("registry"):
            cred = prepare.credential(bundle, env)
            self.ctx.learn(prepare.secrets_of(env, cred))
        with self.phase("preflight"):
            denv = docker_env(self.cfg.docker, self.state.docker_dir)
            info = preflight.docker_info(self.cfg.docker, denv)
            preflight.run(info, self.cfg.docker, self.cfg.disk, bundle.disk_need_bytes)
            prev = plan.previous.project if plan.previous else None
            for project in dict.fromkeys(p for p in (bundle.project, prev) if p):  # up, down
                self._check_owned(project)
        # Everything is checked: only now does anything on the box change.
        return prepare.ready(bundle, env_text, cred, self.rec.tick_id)

    def _read_secrets(self, bundle: Bundle) -> prepare.SecretReads:
        """Every manifest entry from OpenBao. A variable's secret that OpenBao lacks is noted
        (ENV_INCOMPLETE names them all at render); a missing registry credential ends the tick."""
        from monky_deployd.core import prepare

        assert self.token is not None and self.bao is not None
        found: dict[ManifestEntry, object] = {}
        absent: dict[str, str] = {}
        pages: KvPages = {}  # one OpenBao read per distinct path
        for entry in bundle.manifest:
            try:
                found[entry] = self.bao.read_secret(self.token.token, entry.path, entry.key, pages)
            except BaoError as err:
                if err.code is not Code.SECRET_MISSING or entry.use is not None:
                    raise
                absent[entry.name] = f"{entry.path}#{entry.key}"
        return prepare.SecretReads(found, absent)

    # -- report ------------------------------------------------------------------------------

    def _report(self) -> None:
        assert self.tenancy is not None and self.token is not None
        started = time.monotonic()
        self.rec.finished_at = self.clock()
        ok = True
        body = self.ctx.masker.mask_obj(report.body(self.rec))
        try:
            # a tick past its deadline still tells tenancy, within one request's deadline
            with logs.phase("report"), deadline.without_tick():
                self.tenancy.report(self.token.token, body)
        except DeployError as err:
            ok = False
            log.warning(
                f"report not delivered (the deploy outcome stands); kept for a later tick: {err}",
                extra={"event": "report.failed", "phase": "report", "code": err.code},
            )
            recover.keep_report(self.state, self.rec, body)
        self.rec.phases.append(PhaseTiming("report", ok, int((time.monotonic() - started) * 1000)))
