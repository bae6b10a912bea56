"""``monky-deployd doctor``: live checks of every fault class the estate has met, one line each,
in the order a person debugs (OPERATIONS.md, "doctor").

    config -> state-dir -> grant -> identity -> controller -> run-host-dropin
    -> tenancy-intercept, openbao-intercept
    -> tenancy -> openbao -> token -> checkin -> secrets -> registry
    -> docker-socket -> disk -> compose -> policy -> timer -> last-tick -> clock

Each check is a function of the run's context returning a ``core.commands.checks.Check``; it runs
isolated (a ``DeployError`` is its FAIL, the adapter's own sentence as the fact; anything else is
an INTERNAL FAIL) and a check whose prerequisite is not OK (FAIL or SKIP) is SKIP. Doctor
changes nothing: it never asks tenancy for a lease, never posts a report, never writes the state
dir (the stored token is only looked up; when there is none or it is dead, doctor logs in with
the grant, which costs no lease, and revokes that token at the end). It makes one check-in
without ``If-None-Match`` (as ``plan`` does) to learn tenancy's verdict on the token and the
bundle whose secret paths and registry credential it then reads. Every printed line passes a
``Masker`` of every secret doctor held.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from monky_deployd.adapters.box.grant import read_grant
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.agent import logs
from monky_deployd.agent.commands import doctor_box, doctor_ziti, progress
from monky_deployd.agent.commands.doctorrun import Clock, Run
from monky_deployd.agent.observe import observe
from monky_deployd.config import load
from monky_deployd.core.commands import checks
from monky_deployd.core.commands.checks import Check
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline, fault_of
from monky_deployd.core.records.tickrecord import rfc3339
from monky_deployd.core.render import mask
from monky_deployd.core.render.mask import Masker
from monky_deployd.core.wire import checkin as wire

log = logging.getLogger(__name__)

# -- the checks ------------------------------------------------------------------------------


def check_config(run: Run) -> Check:
    try:
        run.cfg = load(run.config_path)
    except DeployError as err:
        from monky_deployd.adapters import accounts

        seat = None
        if err.code is Code.CONFIG_UNREADABLE:  # this user's fix, or root's seat (issue 36)
            seat = accounts.config_closed(run.config_path, "doctor", err.message)
        if seat is None:
            raise
        return Check("config", "FAIL", seat[0], seat[1], str(err.code))
    c = run.cfg
    closed = doctor_box.closed_to_agent(
        "config",
        run.config_path,
        str(Code.CONFIG_UNREADABLE),
        "owner root, group monky-deployd, mode 0640",
        c.service_user,
    )
    if closed is not None:
        return closed
    where = "" if c.transport == "plain" else f", identity {c.identity_path}"
    return Check(
        "config",
        "OK",
        f"{run.config_path} is valid: env {c.env}, transport {c.transport}{where}, "
        f"state_dir {c.state_dir}",
    )


def check_grant(run: Run) -> Check:
    cfg = run.config
    jwt = read_grant(cfg.grant_file)
    run.secrets.append(jwt)
    closed = doctor_box.closed_to_agent(
        "grant",
        cfg.grant_file,
        str(Code.GRANT_UNREADABLE),
        f"owner {cfg.service_user}, mode 0600",
        cfg.service_user,
    )
    return closed or checks.grant_check("grant", str(cfg.grant_file), jwt, cfg.env, run.clock())


def check_tenancy(run: Run) -> Check:
    cfg = run.config
    run.tenancy = Tenancy(
        doctor_ziti.client(run), cfg.tenancy, cfg.env, max_body_bytes=cfg.max_bundle_bytes
    )
    run.probe = run.tenancy.probe()
    run.probed_at = run.clock()
    return Check(
        "tenancy",
        "OK",
        f"tenancy at {run.tenancy.address} answers (GET / -> HTTP {run.probe.status})",
    )


def check_openbao(run: Run) -> Check:
    run.bao = Bao(doctor_ziti.client(run), run.config.openbao)
    run.bao.health()
    return Check("openbao", "OK", f"OpenBao at {run.bao.address} answers and is unsealed")


def check_token(run: Run) -> Check:
    """The stored token (lookup-self, no write); else a login with the grant (never a lease)."""
    cfg, bao = run.config, run.bao
    assert bao is not None
    try:
        stored = StateDir(cfg.state_dir).read_token()
    except ValueError as exc:
        stored, why = None, f"the token record is unusable ({exc})"
    else:
        why = "no token is stored (a fresh box)"
    if stored is not None and stored.env != cfg.env:
        why = f"the token record belongs to environment {stored.env}"
        stored = None
    held = stored.token if stored is not None else None
    dead = False  # a stored token that lookup-self calls dead: the agent has not run for a while
    if held is not None and held.grant_jti:
        with suppress(DeployError):
            claims = checks.grant_claims(read_grant(cfg.grant_file)) or {}
            jti = str(claims.get("jti") or "")
            if jti and jti != held.grant_jti:  # a new kit: the tick drops the token, as here
                why = (
                    f"the stored {held.kind} token descends from grant {held.grant_jti}, and "
                    f"grant.jwt now holds {jti} (a new kit)"
                )
                held = None
    wait = ""
    if stored is not None and stored.lease_not_before and stored.lease_not_before > run.clock():
        when = rfc3339(stored.lease_not_before, "seconds")
        wait = f"; tenancy rate-limited leases: none is asked for before {when}"
    if held is not None:
        run.secrets.append(held.token)
        info = bao.lookup_self(held.token)
        if info is not None:
            run.token, run.token_kind = held.token, held.kind
            renew = "renewable" if info.renewable else "not renewable"
            lease = f" (lease {held.lease_id})" if held.lease_id else ""
            fact = (
                f"the stored {held.kind} token{lease} is valid: {checks.duration(info.ttl_s)} "
                f"left, {renew}{wait}"
            )
            low = info.ttl_s < cfg.token.min_ttl_s and not info.renewable
            if low or wait:
                return Check("token", "WARN", fact, "tenancy's lease budget for this env")
            return Check("token", "OK", fact)
        why = f"the stored {held.kind} token is expired or revoked (lookup-self answered 403)"
        dead = True
    login = bao.login_jwt(read_grant(cfg.grant_file))
    run.token, run.token_kind, run.own_login = login.token, "bootstrap", True
    run.secrets.append(login.token)
    fact = (
        f"{why}; the grant logs in to OpenBao (bootstrap token, {checks.duration(login.ttl_s)}): "
        f"the next tick swaps it for a lease{wait}"
    )
    if dead or wait:
        return Check("token", "WARN", fact, "why the agent's last ticks did not keep the token")
    return Check("token", "OK", fact)


def check_checkin(run: Run) -> Check:
    from monky_deployd.core.admission import prepare

    cfg, tenancy = run.config, run.tenancy
    assert tenancy is not None and run.token is not None
    state = StateDir(cfg.state_dir)
    local = observe.read_local(state)
    applied = local.record
    host = state.read_host_facts() or wire.HostFacts(
        hostname=socket.gethostname(), docker="", compose=""
    )
    body = observe.checkin_body(host, local)
    answer = tenancy.checkin(run.token, body, None)
    now = applied.revision if applied else "nothing"
    if answer.status == 204:
        return Check(
            "checkin",
            "OK",
            f"tenancy accepts the {run.token_kind} token; no desired state yet (applied: {now})",
        )
    assert answer.revision is not None and answer.bundle is not None
    run.bundle = prepare.check_bundle(answer.revision, answer.bundle)
    return Check(
        "checkin",
        "OK",
        f"tenancy accepts the {run.token_kind} token; desired revision {answer.revision} "
        f"(applied: {now})",
    )


def check_secrets(run: Run) -> Check:
    bao, bundle = run.bao, run.bundle
    assert bao is not None and run.token is not None
    if bundle is None:
        return Check("secrets", "OK", "no desired bundle: no secret path to read")
    failures: list[DeployError] = []
    for entry in bundle.manifest:
        try:
            value = bao.read_secret(run.token, entry.path, entry.key)
        except DeployError as err:
            failures.append(err)
            continue
        if entry.use is not None:  # its password is masked once parsed (the user is no secret)
            run.registry_value = value
        else:
            run.secrets.extend(mask.strings_in(value))
    n = len(bundle.manifest)
    if failures:
        first = failures[0]
        more = f" ({len(failures)} of {n} entries fail)" if len(failures) > 1 else ""
        return Check("secrets", "FAIL", first.message + more, first.hint, str(first.code))
    paths = ", ".join(f"{e.path}#{e.key}" for e in bundle.manifest) or "none"
    return Check(
        "secrets",
        "OK",
        f"all {n} manifest entries of revision {bundle.revision} are readable ({paths})",
    )


def _policy(run: Run) -> Check:
    from monky_deployd.agent import (
        policyview as policy,
    )  # the running revision under today's policy

    return policy.doctor_check(run.config, mask.NO_SECRETS.extend(run.secrets))


def check_clock(run: Run) -> Check:
    assert run.probe is not None and run.tenancy is not None
    remote = None
    if run.probe.date:
        with suppress(TypeError, ValueError):
            remote = email.utils.parsedate_to_datetime(run.probe.date).timestamp()
    return checks.skew_check("clock", run.probed_at, remote, f"tenancy at {run.tenancy.address}")


# -- running them ----------------------------------------------------------------------------

# (name, prerequisites, check): the order is the one a person debugs in
CHECKS: tuple[tuple[str, tuple[str, ...], Callable[[Run], Check]], ...] = (
    ("config", (), check_config),
    # the state dir before anything that reads it (the token) or runs docker with the agent's
    # HOME and DOCKER_CONFIG in it (disk, compose): its ownership is the cause, those symptoms
    ("state-dir", ("config",), doctor_box.check_state_dir),
    ("grant", ("config",), check_grant),
    ("identity", ("config",), doctor_ziti.check_identity),
    ("controller", ("identity",), doctor_ziti.check_controller),
    # the tunneler's mode before the intercepts it serves (a run-host drop-in turns them off)
    ("run-host-dropin", ("config",), doctor_box.check_dropin),
    ("tenancy-intercept", ("controller",), doctor_ziti.check_tenancy_intercept),
    ("openbao-intercept", ("controller",), doctor_ziti.check_openbao_intercept),
    ("tenancy", ("tenancy-intercept",), check_tenancy),
    ("openbao", ("openbao-intercept",), check_openbao),
    ("token", ("openbao",), check_token),
    ("checkin", ("tenancy", "token"), check_checkin),
    ("secrets", ("checkin",), check_secrets),
    ("registry", ("secrets",), doctor_box.check_registry),
    ("docker-socket", ("config",), doctor_box.check_socket),
    # `docker info` says where pulls write
    ("disk", ("docker-socket", "state-dir"), doctor_box.check_disk),
    ("compose", ("docker-socket", "state-dir"), doctor_box.check_compose),
    ("policy", ("compose",), lambda run: _policy(run)),
    ("timer", (), doctor_box.check_timer),  # needs no config
    ("last-tick", (), doctor_box.check_last_tick),  # the unit's, whoever runs doctor
    ("clock", ("tenancy",), check_clock),
)


def _one(run: Run, name: str, fn: Callable[[Run], Check]) -> Check:
    try:
        with progress.waiting(progress.doctor_line(name)):  # on a terminal: what it waits for
            return fn(run)
    except (DeployError, TickDeadline) as exc:
        return checks.from_error(name, fault_of(exc))
    except Exception as exc:  # a bug: still one line, and the other checks run
        log.debug("doctor check crashed", exc_info=True)
        return Check(
            name,
            "FAIL",
            f"unexpected {type(exc).__name__}: {exc}",
            "this is a monky-deployd bug: report this line",
            str(Code.INTERNAL),
        )


def run_checks(config_path: Path, *, clock: Clock = time.time) -> list[Check]:
    run = Run(config_path, clock)
    done: dict[str, Check] = {}
    root: dict[str, str] = {}  # a skipped check -> the failed check it waits for
    try:
        for name, needs, fn in CHECKS:
            blocked = next((n for n in needs if done[n].status in ("FAIL", "SKIP")), None)
            if blocked is not None:
                root[name] = root.get(blocked, blocked)
                done[name] = checks.skipped(name, root[name], done[root[name]].status)
            else:
                done[name] = _one(run, name, fn)
    finally:
        _close(run)
    mask = Masker(s for s in run.secrets if s)
    return [
        Check(c.check, c.status, mask(c.fact), mask(c.hint), c.code, mask(c.detail))
        for c in done.values()
    ]


def _close(run: Run) -> None:
    if run.own_login and run.bao is not None and run.token is not None:
        with suppress(DeployError):
            run.bao.revoke_self(run.token)  # doctor's own login: leave no token behind
    if run.client is not None:
        run.client.close()


def main(
    config_path: Path, *, as_json: bool, log_format: str = "text", level: int = logging.WARNING
) -> int:
    """Print the checks (lines, or a JSON list) and return the exit status. Log lines go to
    stderr (warnings only unless --debug: the adapters' chatter stays out)."""
    logs.setup(log_format, level, stream=sys.stderr)
    results = run_checks(config_path)
    if as_json:
        print(json.dumps([c.as_json() for c in results], indent=2))
        return checks.exit_status(results)
    colour = logs.use_colour(sys.stdout, os.environ)
    for c in results:
        text = checks.line(c)
        if colour:
            text = f"{_COLOURS[c.status]}{c.status}\033[0m{text[len(c.status) :]}"
        print(text)
    return checks.exit_status(results)


_COLOURS = {"OK": "\033[32m", "WARN": "\033[33m", "FAIL": "\033[31m", "SKIP": "\033[2m"}
