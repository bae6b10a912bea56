"""``monky-deployd plan``: what the next apply would change, changing nothing.

    token     the token the agent holds (token.json), if OpenBao's lookup-self says it works;
              never a renewal, a lease or a write. None usable: PLAN_NO_TOKEN (exit 2), unless
              ``--login`` (a bootstrap token from the grant: no lease, kept in memory only,
              revoked at the end as doctor does)
    checkin   WITHOUT If-None-Match (the bundle comes back even when it is the applied one);
              the body says what is applied, as a tick's would (tenancy records it: the truth)
    plan      ``core.lifecycle.decide.decide`` on the tick's own observation
    (``agent.observe.observe``, without
              its side effects: a pre-empted hold or an expired suspend stay on disk)
    checks    the tick's own checks (``agent.apply.prepare.check``): bundle, secrets, render,
              registry credential, pre-flight, project ownership
    diff      compose (unified, masked), .env keys and secrets by keyed hash (names only),
              each image's digest at its registry (a manifest HEAD, no pull), the services
              ``up`` would create, recreate, remove or start, and the apply's reasons

No lock is taken, no file is written (the state dir stays byte-identical), nothing is pulled,
no report is posted. Exit 0: no change; 1: changes; 2: an error (the plan is incomplete).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

from monky_deployd.adapters import deadline
from monky_deployd.adapters.box.docker import preflight
from monky_deployd.adapters.box.docker.compose import docker_env
from monky_deployd.adapters.box.grant import read_grant
from monky_deployd.adapters.box.state.state import COMPOSE_FILE, ENV_FILE, MODEL_FILE, StateDir
from monky_deployd.adapters.fsutil import read_if_exists
from monky_deployd.adapters.net import transport
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.registry import ImageRef, Registry, insecure
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.agent import context, logs
from monky_deployd.agent.apply import prepare, reasons
from monky_deployd.agent.observe import observe, pace
from monky_deployd.agent.token import HeldToken
from monky_deployd.config import Config
from monky_deployd.core.admission import composefile
from monky_deployd.core.commands import diff
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline, fault_of
from monky_deployd.core.lifecycle.decide import Noop, decide
from monky_deployd.core.lifecycle.plans import (
    Apply,
    Backoff,
    Hold,
    Idle,
    Paused,
    Restore,
    Stop,
    Waiting,
)
from monky_deployd.core.records.applied import Applied
from monky_deployd.core.records.held import Held
from monky_deployd.core.records.reasons import Fingerprint, fingerprint, key_changes
from monky_deployd.core.records.release import Release
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd.core.records.token_plan import WORKING_FLOOR_S
from monky_deployd.core.render import mask
from monky_deployd.core.render.registry_cred import Credential
from monky_deployd.core.wire import checkin as wire

log = logging.getLogger("monky_deployd")

EXIT_NO_CHANGE, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2


def run_plan(
    cfg: Config,
    *,
    login: bool = False,
    clock: Callable[[], float] = time.time,
    wire_transport: httpx.BaseTransport | None = None,
) -> tuple[int, diff.Diff | None, DeployError | None]:
    """(exit status, the diff, the error that made it incomplete)."""
    logs.set_masker(mask.NO_SECRETS)
    try:
        with deadline.tick(cfg.tick_deadline_s):
            client = transport.open_client(cfg, wire_transport)
            try:
                dry = _Dry(cfg, client, clock, login)
                try:
                    found = dry.run()
                finally:
                    dry.revoke_login()  # --login's own token: leave none behind
            finally:
                client.close()
    except (DeployError, TickDeadline) as exc:
        err, masked = fault_of(exc), logs.masker()
        return (
            EXIT_ERROR,
            None,
            DeployError(
                masked(err.message), code=err.code, hint=masked(err.hint), detail=masked(err.detail)
            ),
        )
    failed = [i for i in found.images if i.error]
    if failed:
        return (
            EXIT_ERROR,
            found,
            DeployError(
                f"{len(failed)} image digest(s) could not be checked: {failed[0].error}",
                code=Code.REGISTRY_UNREACHABLE,
                hint="the registry named in the compose file and the registry credential",
            ),
        )
    return (EXIT_CHANGES if found.changes else EXIT_NO_CHANGE), found, None


class _Dry:
    def __init__(
        self, cfg: Config, client: httpx.Client, clock: Callable[[], float], login: bool
    ) -> None:
        self.cfg, self.clock, self.login = cfg, clock, login
        self.own_token: str | None = None  # the bootstrap token --login obtained
        self.state = StateDir(cfg.state_dir)  # never ``ensure``d: nothing is created
        self.tenancy = Tenancy(client, cfg.tenancy, cfg.env, max_body_bytes=cfg.max_bundle_bytes)
        self.bao = Bao(client, cfg.openbao)
        rec = TickRecord(tick_id="plan", started_at=clock())
        self.ctx = context.Context(cfg, self.state, rec, clock)
        self.token = ""
        self.checked = prepare.Checked()

    def run(self) -> diff.Diff:
        token, kind = self._token()
        self.token = token.token
        self.ctx.learn((token.token,))
        local = observe.read_local(self.state)
        body = observe.checkin_body(self._host_facts(), local)
        answer = self.tenancy.checkin(token.token, body, None)  # no If-None-Match
        obs = observe.observe(self.cfg, self.state, answer, local, self.clock())  # no settle
        plan = decide(obs.facts())
        applied, desired, record = local.applied, obs.desired, local.record
        out = diff.Diff(
            plan.kind,
            plan.reason,
            applied=applied.revision if applied else None,
            desired=desired,
            project=applied.project if applied else None,
            token=kind,
        )
        out.notes.extend(pace.plan_notes(plan, obs.windows, obs.now))
        if applied is not None:  # a policy change never takes it down: plan says so
            from monky_deployd.agent import policyview

            self.ctx.learn(self.ctx.secrets_at_rest(applied.revision))
            out.notes.extend(
                policyview.running_lines(
                    self.cfg, self.state.docker_dir, self.state.revisions_dir, self.ctx.masker
                )
            )
        if isinstance(plan, Idle | Noop):
            return out
        if isinstance(plan, Stop):  # a held host path moved: the tick stops, applies nothing
            out.notes.append(f"the next tick stops and restores nothing: {plan.reason}")
            return out
        if isinstance(plan, Restore):
            prepare.check_owned(self.ctx, plan.applied.project)  # as the restore would
            out.reasons = reasons.for_restore(plan, obs.running, obs.interrupted)
            missing, stopped = reasons.drift(plan.missing, obs.running)
            out.services = tuple(
                [diff.ServiceRow(n, "start", ("missing",)) for n in missing]
                + [diff.ServiceRow(n, "start", ("stopped",)) for n in stopped]
            )
            return out
        assert desired is not None and answer.bundle is not None
        apply = (
            plan if isinstance(plan, Apply) else Apply(desired, answer.bundle, applied, plan.reason)
        )
        # a backoff's attempt is a RETRY; a hold is applied again only by --retry (FORCED)
        held = obs.held if isinstance(plan, Apply | Backoff) else None
        self._diff(out, apply, record, held)
        if isinstance(plan, Hold | Backoff | Paused | Waiting):
            out.notes.append(f"the next tick applies nothing ({plan.kind}): {plan.reason}")
        return out

    # -- token: the held one, or none ------------------------------------------------------

    def _token(self) -> tuple[HeldToken, str]:
        try:
            stored = self.state.read_token()
        except (ValueError, DeployError):
            stored = None
        tok = stored.token if stored is not None and stored.env == self.cfg.env else None
        if tok is not None:
            info = self.bao.lookup_self(tok.token)
            if info is not None and info.ttl_s >= WORKING_FLOOR_S:
                return HeldToken(tok.token, tok.kind), tok.kind
            why = (
                f"the stored {tok.kind} token is expired or revoked (lookup-self: 403)"
                if info is None
                else f"the stored {tok.kind} token has {info.ttl_s} s left"
            )
        else:
            why = f"no token is stored in {self.state.token_file}"
        if self.login:
            login = self.bao.login_jwt(read_grant(self.cfg.grant_file))
            self.own_token = login.token
            return HeldToken(login.token, "bootstrap"), "bootstrap (grant login, not stored)"
        raise DeployError(
            f"plan uses only the token the agent holds, and {why}: the next tick would log in "
            "and spend a lease, which plan never does",
            code=Code.PLAN_NO_TOKEN,
            hint="`monky-deployd apply --once` (it obtains and stores the token), or "
            "`monky-deployd plan --login` (a bootstrap token from the grant: no lease, not stored)",
        )

    def revoke_login(self) -> None:
        """Revoke the token ``--login`` obtained, as doctor does (within one request's deadline,
        even past the tick's); a failure is a warning: the token then lives out its TTL."""
        if self.own_token is None:
            return
        token, self.own_token = self.own_token, None
        try:
            with deadline.without_tick():
                self.bao.revoke_self(token)
        except DeployError as err:
            log.warning(
                "the bootstrap token of plan --login could not be revoked (it expires with its "
                f"TTL): {err}",
                extra={"event": "plan.revoke_failed", "phase": "token", "code": err.code},
            )

    def _host_facts(self) -> wire.HostFacts:
        import socket

        cached = self.state.read_host_facts()
        if cached is not None and cached.hostname == socket.gethostname():
            return cached
        return context.refresh_host_facts(self.ctx, store=False)

    # -- the diff of an apply ------------------------------------------------------------------

    def _diff(
        self,
        out: diff.Diff,
        plan: Apply,
        record: Applied | None,
        held: Held | None,
    ) -> None:
        # the tick's checks: a refusal is the plan's error
        ready = prepare.check(self.ctx, self.bao, self.token, plan, _logged, self.checked)
        out.project = ready.project
        key = self.state.read_hash_key() or os.urandom(32)  # a throwaway key writes nothing
        after = fingerprint(key, ready.compose, ready.env_text, self.checked.secrets)
        before, old_compose = self._before(record, key, after)
        release = self.state.read_release(record.revision) if record else None
        images = self._images(ready.compose, ready.credential, ready.registry_host, release)
        lkg = plan.previous
        found = reasons.for_apply(
            plan,
            held,
            False,
            fp_before=before,
            fp_after=after,
            images_before={i.service: i.before for i in images},
            images_after={i.service: i.after for i in images},
        )
        out.reasons = found
        if before is not None:
            out.env = key_changes(before.env, after.env)
            out.secrets = key_changes(before.secrets, after.secrets)
        else:
            out.env = key_changes({}, after.env)
            out.secrets = key_changes({}, after.secrets)
        old_rev = lkg.revision if lkg else "(none)"
        out.compose_diff = diff.compose_diff(
            old_compose,
            ready.compose,
            f"applied/{old_rev}/compose.yaml",
            f"desired/{plan.revision}/compose.yaml",
            self.ctx.masker,
        )
        out.model_diff = diff.compose_diff(
            self._model(lkg.revision) if lkg else None,
            ready.model,
            f"applied/{old_rev}/{MODEL_FILE}",
            f"desired/{plan.revision}/{MODEL_FILE}",
            self.ctx.masker,
        )
        out.images = images
        if lkg is not None and lkg.project != ready.project:  # down the old, up the new
            gone = f"project {lkg.project} is taken down"
            out.services = tuple(
                [diff.ServiceRow(n, "remove", (gone,)) for n in diff.service_defs(old_compose)]
                + [
                    diff.ServiceRow(n, "create", (f"new project {ready.project}",))
                    for n in diff.service_defs(ready.compose)
                ]
            )
            return
        out.services = diff.services(
            old_compose,
            ready.compose,
            relabel_all=(lkg is None or lkg.revision != plan.revision)
            and not (record is not None and record.service_labels),
            env=out.env,
            images=images,
        )

    def _before(
        self, record: Applied | None, key: bytes, after: Fingerprint
    ) -> tuple[Fingerprint | None, str | None]:
        """The applied revision's fingerprint (applied.json) and compose text; from its files
        when the record predates fingerprints (then secret rotation cannot be told)."""
        if record is None:
            return None, None
        where = self.state.revision_dir(record.revision)
        raw = read_if_exists(where / COMPOSE_FILE)
        compose = raw.decode("utf-8", "replace") if raw is not None else None
        kept = reasons.fingerprint_of(record)
        if kept is not None and self.state.read_hash_key() is not None:
            return kept, compose
        env = (read_if_exists(where / ENV_FILE) or b"").decode("utf-8", "replace")
        from monky_deployd.core.render import atrest

        self.ctx.learn(atrest.secrets_in_env_file(env))
        fp = fingerprint(key, compose or "", env, {})
        return Fingerprint(fp.compose_sha256, fp.env, after.secrets), compose

    def _model(self, revision: str) -> str | None:
        """The judged model of an applied revision (None: staged before models existed); the
        secrets it holds at rest learned first (the model holds them interpolated)."""
        self.ctx.learn(self.ctx.secrets_at_rest(revision))
        raw = read_if_exists(self.state.revision_dir(revision) / MODEL_FILE)
        return raw.decode("utf-8", "replace") if raw is not None else None

    def _docker_info(self) -> dict[str, object] | None:
        """``docker info`` (its insecure registries decide http or https, as for docker)."""
        env = docker_env(self.cfg.docker, self.state.docker_dir)
        try:
            return preflight.docker_info(self.cfg.docker, env)
        except DeployError:
            return None  # the tick's own pre-flight check already named an engine fault

    def _images(
        self,
        compose: str,
        credential: Credential | None,
        cred_host: str | None,
        release: Release | None,
    ) -> tuple[diff.ImageRow, ...]:
        doc = composefile.load(compose)
        known = release.images if release is not None else {}
        rows: list[diff.ImageRow] = []
        found = tuple(composefile.images(doc if isinstance(doc, dict) else {}))
        remote = any(not insecure(ImageRef.parse(i).registry) for _, i in found if "$" not in i)
        registry = Registry(
            self.cfg.docker.command_timeout_s,
            self.cfg.docker.command_timeout_s,
            info=self._docker_info() if remote else None,  # loopback: http without asking
        )
        try:
            for service, image in found:
                before = known[service].digest if service in known else ""
                if "$" in image:
                    why = "not checked: the reference uses a variable"
                    rows.append(diff.ImageRow(service, image, before, skipped=why))
                    continue
                try:
                    after = registry.digest(image, credential, cred_host)
                except DeployError as err:
                    rows.append(
                        diff.ImageRow(service, image, before, "", self.ctx.masker(err.message))
                    )
                    continue
                rows.append(diff.ImageRow(service, image, before, after))
        finally:
            registry.close()
        return tuple(rows)


@contextmanager
def _logged(name: str) -> Iterator[None]:
    """``plan``'s phases: the tick's deadline and log context, no timing record."""
    deadline.check_tick(f"before the {name} check")
    with logs.phase(name):
        yield


__all__ = ["EXIT_CHANGES", "EXIT_ERROR", "EXIT_NO_CHANGE", "run_plan"]
