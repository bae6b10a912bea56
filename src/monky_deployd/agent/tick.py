"""One tick: the phases in order, each timed and logged.

    transport -> token -> checkin -> plan -> secrets -> render -> registry -> preflight
              -> pull -> up -> report

``plan.decide`` chooses IDLE / NOOP / RESTORE / APPLY from facts; this module carries the choice
out with thin adapters. Any ``DeployError`` ends the tick: it is logged once as the first error
line (code, the real fault, what to check), reported to tenancy when a revision was being
applied, and turned into the exit code by ``cli``.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from monky_deployd import __version__
from monky_deployd.adapters.box import docker_api, docker_config, preflight, runner
from monky_deployd.adapters.box.compose import Compose, docker_env
from monky_deployd.adapters.box.state import Applied, StateDir
from monky_deployd.adapters.fsutil import atomic_write, read_if_exists
from monky_deployd.adapters.net import transport
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Checkin, Tenancy
from monky_deployd.agent import logs
from monky_deployd.agent.token import HeldToken, TokenKeeper
from monky_deployd.config import Config
from monky_deployd.core import envfile, registry_cred, report
from monky_deployd.core.bundle import Bundle
from monky_deployd.core.bundle import validate as validate_bundle
from monky_deployd.core.errors import BaoError, DeployError, EnvError, TokenError
from monky_deployd.core.plan import Action, Facts, Plan, decide, needs_container_check
from monky_deployd.core.report import PhaseTiming, TickRecord
from monky_deployd.core.services import Service

log = logging.getLogger("monky_deployd")

Clock = Callable[[], float]


def run_tick(cfg: Config, *, clock: Clock = time.time, config_ms: int = 0) -> TickRecord:
    """Run one tick and return its record; never raises a ``DeployError``."""
    rec = TickRecord(tick_id=uuid.uuid4().hex[:16], started_at=clock())
    logs.set_tick(rec.tick_id)
    rec.phases.append(PhaseTiming("config", True, config_ms))
    t0 = time.monotonic()
    try:
        state = StateDir(cfg.state_dir).ensure()
        with state.lock(cfg.lock_wait_s):
            _Tick(cfg, state, rec, clock).run()
    except DeployError as err:
        _fail(rec, err)
    except Exception as exc:  # a bug: still one named first line and an exit code, not a crash
        log.debug("unexpected exception", exc_info=True, extra={"event": "tick.bug"})
        _fail(
            rec,
            DeployError(
                f"unexpected {type(exc).__name__}: {exc}",
                code="INTERNAL",
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


def _render(template: str, values: dict[str, str], absent: dict[str, str]) -> str:
    """``envfile.render``; an ENV_INCOMPLETE also says which variables OpenBao lacks."""
    try:
        return envfile.render(template, values)
    except EnvError as err:
        lacking = [f"{name} ({where})" for name, where in sorted(absent.items())]
        if err.code != "ENV_INCOMPLETE" or not lacking:
            raise
        raise EnvError(
            f"{err.message}; not found in OpenBao: {', '.join(lacking)}",
            code=err.code,
            hint=err.hint,
        ) from err


class _Tick:
    def __init__(self, cfg: Config, state: StateDir, rec: TickRecord, clock: Clock) -> None:
        self.cfg, self.state, self.rec, self.clock = cfg, state, rec, clock
        self.client: httpx.Client | None = None
        self.tenancy: Tenancy | None = None
        self.keeper: TokenKeeper | None = None
        self.held: HeldToken | None = None
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
            self.client = transport.open_client(self.cfg)
        try:
            self._run_with_client(self.client)
        finally:
            self.client.close()

    def _run_with_client(self, client: httpx.Client) -> None:
        cfg = self.cfg
        self.tenancy = Tenancy(client, cfg.tenancy, cfg.env, max_body_bytes=cfg.max_bundle_bytes)
        self.bao = Bao(client, cfg.openbao)
        with self.phase("token"):
            self.keeper = TokenKeeper(cfg, self.bao, self.tenancy, self.clock)
            self.held = self.keeper.acquire()

        applied = self.state.read_applied()
        with self.phase("checkin"):
            answer = self._checkin(applied)

        running: tuple[Service, ...] | None = None
        desired = answer.revision if answer.status == 200 else None
        if applied and needs_container_check(answer.status, desired, applied.revision):
            with self.phase("inspect"):
                running = tuple(docker_api.project_containers(self.cfg.docker, applied.project))
        plan = decide(
            Facts(
                checkin_status=answer.status,
                desired_revision=desired,
                applied_revision=applied.revision if applied else None,
                applied_services=tuple(applied.services) if applied else (),
                running=running,
            )
        )
        log.info(plan.reason, extra={"event": f"plan.{plan.action.value}", "phase": "plan"})
        if plan.action is Action.IDLE:
            self.rec.outcome, self.rec.message = "idle", plan.reason
            return
        if plan.action is Action.NOOP:
            assert applied is not None
            self.rec.outcome, self.rec.revision, self.rec.message = (
                "noop",
                applied.revision,
                plan.reason,
            )
            return
        try:
            if plan.action is Action.RESTORE:
                assert applied is not None
                self._restore(applied, plan)
            else:
                assert answer.bundle is not None and answer.revision is not None
                self.rec.revision = answer.revision
                self._apply(answer.revision, answer.bundle, applied)
        except DeployError as err:
            _fail(self.rec, err)
        self._report()

    # -- check-in ----------------------------------------------------------------------------

    def _checkin(self, applied: Applied | None) -> Checkin:
        assert self.tenancy and self.keeper and self.held
        body = {
            "agent": {"version": __version__},
            "host": self._host_facts(),
            "applied": {"revision": applied.revision, "outcome": "applied"} if applied else None,
        }
        etag = applied.revision if applied else None
        try:
            return self.tenancy.checkin(self.held.token, body, etag)
        except TokenError as err:
            if err.code != "TOKEN_INVALID":
                raise
            log.warning(
                "tenancy rejected the held token; obtaining a new one once",
                extra={"event": "token.rejected", "kind": self.held.kind},
            )
            self.held = self.keeper.invalidate(self.held)
            return self.tenancy.checkin(self.held.token, body, etag)

    def _host_facts(self) -> dict[str, str]:
        """hostname plus docker/compose versions, cached in the state dir between applies."""
        cache = self.state.root / "host.json"
        raw = read_if_exists(cache)
        if raw:
            try:
                facts = json.loads(raw)
                if isinstance(facts, dict) and facts.get("hostname") == socket.gethostname():
                    return {str(k): str(v) for k, v in facts.items()}
            except ValueError:
                pass
        return self._refresh_host_facts()

    def _refresh_host_facts(self) -> dict[str, str]:
        env = docker_env(self.cfg.docker, self.state.docker_dir)
        timeout = self.cfg.docker.command_timeout_s
        facts = {"hostname": socket.gethostname(), "docker": "", "compose": ""}
        for key, argv in (
            ("docker", (self.cfg.docker.binary, "version", "--format", "{{.Server.Version}}")),
            ("compose", (self.cfg.docker.binary, "compose", "version", "--short")),
        ):
            try:
                facts[key] = runner.run(argv, env=env, timeout=timeout).stdout.strip()
            except DeployError:
                facts[key] = ""
        if facts["docker"] and facts["compose"]:
            atomic_write(self.state.root / "host.json", json.dumps(facts).encode(), 0o600)
        return facts

    # -- apply -------------------------------------------------------------------------------

    def _compose(self, project: str, revision: str, secrets: tuple[str, ...] = ()) -> Compose:
        return Compose(
            self.cfg.docker,
            self.state.docker_dir,
            project,
            self.state.revision_dir(revision),
            secrets,
        )

    def _restore(self, applied: Applied, plan: Plan) -> None:
        self.rec.revision = applied.revision
        with self.phase("up"):
            compose = self._compose(applied.project, applied.revision)
            compose.up()
            self._record_services(applied.project)
        self.rec.outcome = "applied"
        self.rec.message = (
            f"restored {', '.join(plan.missing)} of revision {applied.revision} (no pull)"
        )

    def _apply(self, revision: str, raw: dict[str, Any], applied: Applied | None) -> None:
        with self.phase("bundle"):
            bundle = validate_bundle(revision, raw)
            registry_cred.select_entry([{"name": e.name, "use": e.use} for e in bundle.manifest])
        with self.phase("secrets"):
            values, absent, reg_value = self._read_secrets(bundle)
        secrets = tuple(values.values()) + ((str(reg_value),) if reg_value is not None else ())
        with self.phase("render"):
            env_text = _render(bundle.env_template, values, absent)
        with self.phase("registry"):
            cred = None
            if bundle.registry_entries:
                cred = registry_cred.parse_credential(reg_value, bundle.registry_host)
                secrets += (cred.password,)
        with self.phase("preflight"):
            env = docker_env(self.cfg.docker, self.state.docker_dir)
            info = preflight.docker_info(
                env, self.cfg.docker.binary, self.cfg.docker.command_timeout_s
            )
            preflight.run(info, self.cfg.docker, self.cfg.disk, bundle.disk_need_bytes)
        # Everything is checked: only now does anything on the box change.
        docker_config.write_docker_config(self.state.docker_dir, bundle.registry_host or "", cred)
        self.state.write_revision(revision, bundle.compose, env_text)
        compose = self._compose(bundle.project, revision, secrets)
        with self.phase("pull"):
            compose.pull(bundle.registry_host)
        if applied and applied.project != bundle.project:
            with self.phase("down"):
                self._compose(applied.project, applied.revision).down()
        with self.phase("up"):
            compose.up()
            self._record_services(bundle.project)
        self.state.write_applied(
            Applied(revision, bundle.project, list(bundle.services), report.rfc3339(self.clock()))
        )
        self.state.prune_revisions(keep={revision})
        self._refresh_host_facts()
        running = sum(1 for s in self.rec.services if s["state"] == "running")
        self.rec.outcome = "applied"
        self.rec.message = f"applied {revision}: {running} services running"

    def _read_secrets(self, bundle: Bundle) -> tuple[dict[str, str], dict[str, str], object]:
        """Values by variable name; variables whose secret OpenBao does not have (name ->
        path#key); the registry credential's raw value (None without such an entry)."""
        assert self.held is not None and self.bao is not None
        values: dict[str, str] = {}
        absent: dict[str, str] = {}
        reg_value: object = None
        for entry in bundle.manifest:
            try:
                value = self.bao.read_secret(self.held.token, entry.path, entry.key)
            except BaoError as err:
                if err.code != "SECRET_MISSING" or entry.use is not None:
                    raise
                absent[entry.name] = f"{entry.path}#{entry.key}"
                continue
            if entry.use is not None:
                reg_value = value
            elif isinstance(value, str):
                values[entry.name] = value
            elif isinstance(value, int | float) and not isinstance(value, bool):
                values[entry.name] = str(value)
            else:
                raise EnvError(
                    f"secret {entry.path}#{entry.key} for variable {entry.name} is a "
                    f"{type(value).__name__}, not a string",
                    code="SECRET_NOT_STRING",
                    hint=f"the value stored at {entry.path} in OpenBao's KV mount",
                )
        return values, absent, reg_value

    def _record_services(self, project: str) -> None:
        self.rec.services = [
            s.as_report() for s in docker_api.project_containers(self.cfg.docker, project)
        ]

    # -- report ------------------------------------------------------------------------------

    def _report(self) -> None:
        assert self.tenancy is not None and self.held is not None
        started = time.monotonic()
        self.rec.finished_at = self.clock()
        ok = True
        try:
            with logs.phase("report"):
                self.tenancy.report(self.held.token, report.body(self.rec))
        except DeployError as err:
            ok = False
            log.warning(
                f"report not delivered (the deploy outcome stands): {err}",
                extra={"event": "report.failed", "phase": "report", "code": err.code},
            )
        self.rec.phases.append(PhaseTiming("report", ok, int((time.monotonic() - started) * 1000)))
