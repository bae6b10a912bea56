"""One tick: the phases in order, each timed and logged.

    transport -> token -> checkin -> [inspect] -> plan
      apply:   bundle -> secrets -> render -> registry -> preflight      (checks: nothing changes)
               -> stage -> pull -> [down] -> up -> verify -> commit        (the box steps)
               on failure: [rollback -> verify] (core.recovery), then hold or back off
      restore: up
      hold / backoff: nothing (the desired revision failed here before)
    -> report

``core.plan.decide`` turns the facts (check-in answer, applied record, held record,
containers, the clock) into ``Idle | Noop | Restore | Apply | Hold | Backoff``; an apply's
checks are ``core.prepare``'s pure functions around
two reads (OpenBao, ``docker info``); ``core.plan`` then lists the box steps and
``agent.steps`` performs them, each inside its phase. Any ``DeployError`` ends the tick: it is
logged once as the first error line (code, the real fault, what to check), reported to tenancy
when a revision was being applied, and turned into the exit code by ``cli``.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from monky_deployd.adapters.box import docker_api, locks, preflight
from monky_deployd.adapters.box.compose import docker_env
from monky_deployd.adapters.box.state import StateDir
from monky_deployd.adapters.net import transport
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Checkin, Tenancy
from monky_deployd.agent import logs, steps
from monky_deployd.agent.token import HeldToken, TokenKeeper
from monky_deployd.config import Config
from monky_deployd.core import gates, prepare, recovery, report, wire
from monky_deployd.core.bundle import Bundle, ManifestEntry
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
    Ready,
    Restore,
    apply_steps,
    decide,
    needs_container_check,
    restore_steps,
    rollback_steps,
)
from monky_deployd.core.records import Held, Suspended
from monky_deployd.core.report import PhaseTiming, TickRecord
from monky_deployd.core.services import Service

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
    rec.phases.append(PhaseTiming("config", True, config_ms))
    t0 = time.monotonic()
    try:
        state = StateDir(cfg.state_dir).ensure()
        with state.lock(cfg.lock_wait_s):
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


def _fail_first(rec: TickRecord, err: DeployError) -> None:
    """Log the real fault now (a rollback follows); the tick's end is logged again later."""
    _fail(rec, err)


def _fail(rec: TickRecord, err: DeployError) -> None:
    rec.outcome, rec.code, rec.message, rec.detail = err.outcome, err.code, err.message, err.detail
    failed_phase = next((p.name for p in reversed(rec.phases) if not p.ok), "-")
    log.error(
        str(err),
        extra=logs.fields(
            event="tick.error",
            phase=failed_phase,
            code=err.code,
            hint=err.hint or None,
            detail=err.detail or None,
        ),
    )


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

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
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
        with self.phase("token"):
            self.keeper = TokenKeeper(cfg, self.bao, self.tenancy, self.clock, state=self.state)
            self.token = self.keeper.acquire()

        record = self.state.read_applied()
        self.held = self.state.read_held()
        applied = (
            AppliedFacts(record.revision, record.project, tuple(record.services))
            if record
            else None
        )
        with self.phase("checkin"):
            answer = self._checkin(applied)

        desired = answer.revision if answer.status == 200 else None
        running: tuple[Service, ...] | None = None
        held_rev = self.held.revision if self.held else None
        if applied and needs_container_check(answer.status, desired, applied.revision, held_rev):
            with self.phase("inspect"):
                running = tuple(docker_api.project_containers(self.cfg.docker, applied.project))
        self._forget_preempted_hold(answer.status, desired, applied)
        now = self.clock()
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
                self._valid_locks(now),
                self._suspended(now),
            )
        )
        if isinstance(plan, Hold | Backoff | Paused):
            self._skip(plan)
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
            return  # an update lock: pulled, nothing recreated, no report (tried next tick)
        except DeployError as err:
            _fail(self.rec, err)
        self._report()

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
            return self.tenancy.checkin(self.token.token, body, etag)

    # -- hold and backoff --------------------------------------------------------------------

    def _forget_preempted_hold(
        self, status: int, desired: str | None, applied: AppliedFacts | None
    ) -> None:
        """A held or backing-off revision that tenancy no longer wants is forgotten: a new
        desired revision pre-empts the hold and the backoff on this very tick."""
        wanted = applied.revision if status == 304 and applied else desired
        if self.held is None or wanted is None or wanted == self.held.revision:
            return
        log.info(
            f"revision {self.held.revision} is no longer desired ({wanted} is): "
            "its hold and backoff are dropped",
            extra={"event": "hold.preempted", "phase": "plan", "revision": self.held.revision},
        )
        self.state.clear_held()
        self.held = None

    def _valid_locks(self, now: float) -> tuple[gates.Lock, ...]:
        """The update locks in force; stale ones are named in a warning and ignored."""
        found = locks.read_locks(self.cfg.locks.dir)
        valid, stale = gates.split_locks(found, now, self.cfg.locks.default_ttl_s)
        for lk in stale:
            log.warning(
                f"ignoring the stale update lock {lk.describe(now)}: its TTL is over",
                extra={"event": "lock.stale", "phase": "plan", "lock": lk.name},
            )
        for lk in valid:
            log.info(
                f"update lock {lk.describe(now)}",
                extra={"event": "lock.held", "phase": "plan", "lock": lk.name},
            )
        return valid

    def _suspended(self, now: float) -> Suspended | None:
        """An active suspend; an expired one (``--for``) is removed."""
        found = self.state.read_suspend()
        if found is None:
            return None
        if not found.active(now):
            log.info(
                "the suspend's --for duration is over: applies resume",
                extra={"event": "suspend.expired", "phase": "plan"},
            )
            self.state.clear_suspend()
            return None
        return found

    def _skip(self, plan: Hold | Backoff | Paused) -> None:
        """No apply this tick: say why and when the next attempt is; no report."""
        self.rec.revision = plan.revision
        self.rec.message = plan.reason
        if isinstance(plan, Paused):
            self.rec.outcome, self.rec.code = "held", Code.SUSPENDED
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
            self.rec.outcome, self.rec.code = "held", Code.APPLY_BACKOFF
            next_at = report.rfc3339(plan.next_at, "seconds")
            log.warning(
                plan.reason,
                extra={"event": "plan.backoff", "phase": "plan", "next_attempt_at": next_at},
            )
        elif plan.held.stalled:
            self.rec.outcome, self.rec.code = "failed", Code.ROLLBACK_FAILED
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
            self.rec.outcome, self.rec.code = "held", Code.REVISION_HELD
            log.warning(plan.reason, extra={"event": "plan.hold", "phase": "plan"})

    # -- restore and apply -------------------------------------------------------------------

    def _restore(self, plan: Restore) -> None:
        pinned = self.state.has_pins(plan.applied.revision)
        steps.run(self.ctx, restore_steps(plan, pinned), self.phase)
        self.rec.outcome = "applied"
        self.rec.message = (
            f"restored {', '.join(plan.missing)} of revision {plan.applied.revision} (no pull)"
        )

    def _apply(self, plan: Apply) -> None:
        """Every check first (nothing on the box changes), then the box steps; a failure rolls
        back to the last-known-good release or backs off (``core.recovery``)."""
        ready: Ready | None = None
        try:
            ready = self._check(plan)
            steps.run(self.ctx, apply_steps(plan, ready), self.phase)
        except DeployError as err:
            self._recover(plan, ready, err)
        if plan.locks:
            self.rec.outcome, self.rec.code = "held", Code.UPDATE_LOCKED
            self.rec.message = (
                f"revision {plan.revision} is pulled but not applied: update locked by "
                + "; ".join(lk.describe(self.clock()) for lk in plan.locks)
                + "; trying again next tick"
            )
            log.warning(self.rec.message, extra={"event": "apply.locked", "phase": "plan"})
            raise _Skipped
        running = sum(1 for s in self.rec.services if s["state"] == "running")
        self.rec.outcome = "applied"
        self.rec.message = f"applied {plan.revision}: {running} services running (verified)"

    def _recover(self, plan: Apply, ready: Ready | None, err: DeployError) -> None:
        """After a failed apply: roll back and hold, or back off; always raises."""
        failed_phase = next((p.name for p in reversed(self.rec.phases) if not p.ok), "-")
        lkg = plan.previous
        step = recovery.after_failure(
            revision=plan.revision,
            code=err.code,
            message=err.message,
            failed_phase=failed_phase,
            lkg=lkg.revision if lkg else None,
            on_failure=ready.on_failure if ready else "rollback",
            previous=self.held,
            now=self.clock(),
            base_s=self.cfg.backoff.base_s,
            cap_s=self.cfg.backoff.cap_s,
            jitter=self.cfg.backoff.jitter,
            u=self.options.rand(),
        )
        if step.rollback_to is None or ready is None or lkg is None:
            self.state.write_held(step.held)
            if step.held.next_attempt_at is not None:
                when = report.rfc3339(step.held.next_attempt_at, "seconds")
                log.warning(
                    f"revision {plan.revision} failed (attempt {step.held.attempts}); "
                    f"next attempt at {when} unless the desired revision changes",
                    extra={"event": "apply.backoff", "next_attempt_at": when},
                )
            raise err
        log.warning(
            f"revision {plan.revision} failed in {failed_phase} ({err.code}); "
            f"rolling back to {lkg.revision} (pinned images, no pull)",
            extra={"event": "rollback.start", "revision": plan.revision, "to": lkg.revision},
        )
        _fail_first(self.rec, err)  # the real fault's line comes before the rollback's
        try:
            steps.run(self.ctx, rollback_steps(ready, lkg), self.phase)
        except DeployError as rb_err:
            self.rec.rollback = wire.RollbackRow(to_revision=lkg.revision, ok=False)
            self.state.write_held(recovery.after_rollback(step.held, ok=False))
            raise DeployError(
                f"revision {plan.revision} failed ({err.code}: {err.message}) and the rollback "
                f"to {lkg.revision} failed too ({rb_err.code}: {rb_err.message}); the box is "
                "stalled: no tick applies or rolls back on its own",
                code=Code.ROLLBACK_FAILED,
                hint="`docker ps -a` and `docker logs` for the project; publish a fixed "
                "revision, or fix the box and run `monky-deployd apply --once --retry`",
                detail="\n".join(d for d in (err.detail, rb_err.detail) if d),
            ) from rb_err
        self.rec.rollback = wire.RollbackRow(to_revision=lkg.revision, ok=True)
        self.state.write_held(recovery.after_rollback(step.held, ok=True))
        raise DeployError(
            f"{err.message}; rolled back to {lkg.revision} (verified) and holding {plan.revision}",
            code=err.code,
            hint=err.hint,
            detail=err.detail,
            outcome=err.outcome,
        )

    def _check(self, plan: Apply) -> Ready:
        """Every check of an apply, each in its phase: nothing on the box changes."""
        with self.phase("bundle"):
            bundle = prepare.check_bundle(plan.revision, plan.bundle)
        with self.phase("secrets"):
            env = prepare.env_values(bundle, self._read_secrets(bundle))
        with self.phase("render"):
            env_text = prepare.render_env(bundle.env_template, env)
        with self.phase("registry"):
            cred = prepare.credential(bundle, env)
        self.ctx.secrets = prepare.secrets_of(env, cred)
        with self.phase("preflight"):
            denv = docker_env(self.cfg.docker, self.state.docker_dir)
            info = preflight.docker_info(
                denv, self.cfg.docker.binary, self.cfg.docker.command_timeout_s
            )
            preflight.run(info, self.cfg.docker, self.cfg.disk, bundle.disk_need_bytes)
        # Everything is checked: only now does anything on the box change.
        return prepare.ready(bundle, env_text, cred)

    def _read_secrets(self, bundle: Bundle) -> prepare.SecretReads:
        """Every manifest entry from OpenBao. A variable's secret that OpenBao lacks is noted
        (ENV_INCOMPLETE names them all at render); a missing registry credential ends the tick."""
        assert self.token is not None and self.bao is not None
        found: dict[ManifestEntry, object] = {}
        absent: dict[str, str] = {}
        for entry in bundle.manifest:
            try:
                found[entry] = self.bao.read_secret(self.token.token, entry.path, entry.key)
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
        try:
            with logs.phase("report"):
                self.tenancy.report(self.token.token, report.body(self.rec))
        except DeployError as err:
            ok = False
            log.warning(
                f"report not delivered (the deploy outcome stands): {err}",
                extra={"event": "report.failed", "phase": "report", "code": err.code},
            )
        self.rec.phases.append(PhaseTiming("report", ok, int((time.monotonic() - started) * 1000)))
