"""One tick: the phases in order, each timed and logged.

    transport -> token -> checkin -> [inspect] -> plan
      apply:   bundle -> secrets -> render -> registry -> preflight      (checks: nothing changes)
               -> stage -> pull -> [down] -> up -> commit                  (the box steps)
      restore: up
    -> report

``core.plan.decide`` turns the facts (check-in answer, applied record, containers) into
``Idle | Noop | Restore | Apply``; an apply's checks are ``core.prepare``'s pure functions around
two reads (OpenBao, ``docker info``); ``core.plan`` then lists the box steps and
``agent.steps`` performs them, each inside its phase. Any ``DeployError`` ends the tick: it is
logged once as the first error line (code, the real fault, what to check), reported to tenancy
when a revision was being applied, and turned into the exit code by ``cli``.

The tick has one overall deadline (``tick_deadline_s``, ``adapters.deadline``): every request
and child gets at most the time left, and past it the tick ends with ``TICK_DEADLINE`` at the
next phase boundary (the report still goes out, within its own request deadline).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import httpx

from monky_deployd.adapters import deadline
from monky_deployd.adapters.box import docker_api, preflight
from monky_deployd.adapters.box.compose import docker_env
from monky_deployd.adapters.box.state import StateDir
from monky_deployd.adapters.net import transport
from monky_deployd.adapters.net.bao import Bao, read_grant
from monky_deployd.adapters.net.tenancy import Checkin, Tenancy
from monky_deployd.agent import logs, steps
from monky_deployd.agent.token import HeldToken, TokenKeeper
from monky_deployd.config import Config
from monky_deployd.core import mask, prepare, report, wire
from monky_deployd.core.bundle import Bundle, ManifestEntry
from monky_deployd.core.errors import BaoError, Code, DeployError, TokenError
from monky_deployd.core.plan import (
    AppliedFacts,
    Apply,
    Facts,
    Idle,
    Noop,
    Restore,
    apply_steps,
    decide,
    needs_container_check,
    restore_steps,
)
from monky_deployd.core.report import PhaseTiming, TickRecord
from monky_deployd.core.services import Service

log = logging.getLogger("monky_deployd")

Clock = Callable[[], float]


def run_tick(
    cfg: Config,
    *,
    clock: Clock = time.time,
    config_ms: int = 0,
    wire: httpx.BaseTransport | None = None,
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
                _Tick(cfg, state, rec, clock, wire).run()
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
    level = logging.INFO if rec.outcome in ("applied", "noop", "idle") else logging.ERROR
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


def _fail(rec: TickRecord, err: DeployError) -> None:
    masked = logs.masker()  # the tick's: every secret it has learnt so far
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


class _Tick:
    def __init__(
        self,
        cfg: Config,
        state: StateDir,
        rec: TickRecord,
        clock: Clock,
        wire: httpx.BaseTransport | None = None,
    ) -> None:
        self.cfg, self.state, self.rec, self.clock, self.wire = cfg, state, rec, clock, wire
        self.ctx = steps.Context(cfg, state, rec, clock)
        self.tenancy: Tenancy | None = None
        self.keeper: TokenKeeper | None = None
        self.held: HeldToken | None = None
        self.bao: Bao | None = None

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
            self.held = self.keeper.acquire()
        self.ctx.learn((*self._tokens_at_rest(), self.held.token))

        record = self.state.read_applied()
        applied = (
            AppliedFacts(record.revision, record.project, tuple(record.services))
            if record
            else None
        )
        with self.phase("checkin"):
            answer = self._checkin(applied)

        desired = answer.revision if answer.status == 200 else None
        running: tuple[Service, ...] | None = None
        if applied and needs_container_check(answer.status, desired, applied.revision):
            with self.phase("inspect"):
                running = tuple(docker_api.project_containers(self.cfg.docker, applied.project))
        plan = decide(Facts(answer.status, desired, applied, running, answer.bundle))
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
        except DeployError as err:
            _fail(self.rec, err)
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
        assert self.tenancy and self.keeper and self.held
        body = wire.CheckinRequest.of(
            steps.host_facts(self.ctx), applied.revision if applied else None
        )
        etag = applied.revision if applied else None
        try:
            return self.tenancy.checkin(self.held.token, body, etag)
        except TokenError as err:
            if err.code is not Code.TOKEN_INVALID:
                raise
            log.warning(
                "tenancy rejected the held token; obtaining a new one once",
                extra={"event": "token.rejected", "kind": self.held.kind},
            )
            self.held = self.keeper.invalidate(self.held)
            self.ctx.learn((self.held.token,))
            return self.tenancy.checkin(self.held.token, body, etag)

    # -- restore and apply -------------------------------------------------------------------

    def _check_owned(self, project: str) -> None:
        """PROJECT_NOT_OWNED unless every container of ``project`` came from our revisions/."""
        dirs = docker_api.project_working_dirs(self.cfg.docker, project)
        prepare.check_owned(project, dirs, str(self.state.revisions_dir.absolute()))

    def _restore(self, plan: Restore) -> None:
        with self.phase("preflight"):
            self._check_owned(plan.applied.project)
        steps.run(self.ctx, restore_steps(plan), self.phase)
        self.rec.outcome = "applied"
        self.rec.message = (
            f"restored {', '.join(plan.missing)} of revision {plan.applied.revision} (no pull)"
        )

    def _apply(self, plan: Apply) -> None:
        """Every check first (nothing on the box changes), then the box steps."""
        with self.phase("bundle"):
            bundle = prepare.check_bundle(plan.revision, plan.bundle)
        with self.phase("secrets"):
            reads = self._read_secrets(bundle)
            self.ctx.learn(mask.strings_in(list(reads.found.values())))
            env = prepare.env_values(bundle, reads)
        with self.phase("render"):
            env_text = prepare.render_env(bundle.env_template, env)
        with self.phase("registry"):
            cred = prepare.credential(bundle, env)
            self.ctx.learn(prepare.secrets_of(env, cred))
        with self.phase("preflight"):
            denv = docker_env(self.cfg.docker, self.state.docker_dir)
            info = preflight.docker_info(
                denv, self.cfg.docker.binary, self.cfg.docker.command_timeout_s, self.ctx.masker
            )
            preflight.run(info, self.cfg.docker, self.cfg.disk, bundle.disk_need_bytes)
            prev = plan.previous.project if plan.previous else None
            for project in dict.fromkeys(p for p in (bundle.project, prev) if p):  # up, down
                self._check_owned(project)
        # Everything is checked: only now does anything on the box change.
        steps.run(self.ctx, apply_steps(plan, prepare.ready(bundle, env_text, cred)), self.phase)
        running = sum(1 for s in self.rec.services if s["state"] == "running")
        self.rec.outcome = "applied"
        self.rec.message = f"applied {plan.revision}: {running} services running"

    def _read_secrets(self, bundle: Bundle) -> prepare.SecretReads:
        """Every manifest entry from OpenBao. A variable's secret that OpenBao lacks is noted
        (ENV_INCOMPLETE names them all at render); a missing registry credential ends the tick."""
        assert self.held is not None and self.bao is not None
        found: dict[ManifestEntry, object] = {}
        absent: dict[str, str] = {}
        for entry in bundle.manifest:
            try:
                found[entry] = self.bao.read_secret(self.held.token, entry.path, entry.key)
            except BaoError as err:
                if err.code is not Code.SECRET_MISSING or entry.use is not None:
                    raise
                absent[entry.name] = f"{entry.path}#{entry.key}"
        return prepare.SecretReads(found, absent)

    # -- report ------------------------------------------------------------------------------

    def _report(self) -> None:
        assert self.tenancy is not None and self.held is not None
        started = time.monotonic()
        self.rec.finished_at = self.clock()
        ok = True
        try:
            # a tick past its deadline still tells tenancy, within one request's deadline
            with logs.phase("report"), deadline.without_tick():
                self.tenancy.report(
                    self.held.token, self.ctx.masker.mask_obj(report.body(self.rec))
                )
        except DeployError as err:
            ok = False
            log.warning(
                f"report not delivered (the deploy outcome stands): {err}",
                extra={"event": "report.failed", "phase": "report", "code": err.code},
            )
        self.rec.phases.append(PhaseTiming("report", ok, int((time.monotonic() - started) * 1000)))
